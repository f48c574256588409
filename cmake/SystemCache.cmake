# -DFLASHJIT_SYSTEM_CACHE=ON: the system cache, built by the deviceless sweep with the
# flashjit CLI just built (scripts/build-system-cache.sh) into
# <build>/share/flashjit/system.sqlite, where the build tree's library and CLI find it,
# and installed to <prefix>/share/flashjit/, where the installed ones do (docs/CACHE.md).
# It is rebuilt when the CLI (and so the generator and templates) or a winners file
# changes.
include(GNUInstallDirs)
file(GLOB flashjit_winner_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/data/winners/*.json)
set(flashjit_system_db ${PROJECT_BINARY_DIR}/share/flashjit/system.sqlite)
add_custom_command(OUTPUT ${flashjit_system_db}
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/build-system-cache.sh $<TARGET_FILE:flashjit>
          ${flashjit_system_db} ${flashjit_winner_files}
  DEPENDS flashjit ${flashjit_winner_files} ${PROJECT_SOURCE_DIR}/scripts/build-system-cache.sh
  COMMENT "Building the system cache (the deviceless sweep: minutes of NVRTC)"
  USES_TERMINAL VERBATIM)
add_custom_target(flashjit_system_cache ALL DEPENDS ${flashjit_system_db})
install(FILES ${flashjit_system_db} DESTINATION ${CMAKE_INSTALL_DATADIR}/flashjit
        COMPONENT api)
