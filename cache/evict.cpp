#include "cache/impl.h"

namespace flashjit::cache {

llvm::Error evictUnreferenced(sql::Connection &c, uint64_t maxBytes, llvm::StringRef keep) {
  llvm::Expected<int64_t> pages = c.queryInt("PRAGMA page_count");
  if (!pages)
    return pages.takeError();
  llvm::Expected<int64_t> freePages = c.queryInt("PRAGMA freelist_count");
  if (!freePages)
    return freePages.takeError();
  llvm::Expected<int64_t> pageSize = c.queryInt("PRAGMA page_size");
  if (!pageSize)
    return pageSize.takeError();
  uint64_t used = uint64_t(*pages - *freePages) * uint64_t(*pageSize);
  if (used <= maxBytes)
    return llvm::Error::success();

  // Evict down to 90% of the limit so that the next few publishes do not evict again.
  uint64_t target = maxBytes - maxBytes / 10;
  std::vector<std::string> victims;
  { // the cursor is reset when it goes out of scope, before the deletes
    llvm::Expected<sql::Statement> oldest = c.prepare(
        "SELECT u.key, u.bytes FROM binary_use u WHERE u.key != ?1 AND NOT EXISTS"
        " (SELECT 1 FROM tunings t WHERE t.binary_key = u.key) ORDER BY u.last_used, u.rowid");
    if (!oldest)
      return oldest.takeError();
    oldest->bind(1, keep);
    while (used > target) {
      llvm::Expected<bool> row = oldest->step();
      if (!row)
        return row.takeError();
      if (!*row)
        break; // only referenced binaries left: they stay
      victims.push_back(oldest->text(0));
      uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(oldest->integer(1), 0));
      used -= std::min(used, bytes + 256); // 256: the row's own overhead, roughly
    }
  }

  for (const std::string &key : victims) {
    for (const char *query :
         {"DELETE FROM binaries WHERE key = ?1", "DELETE FROM binary_use WHERE key = ?1"}) {
      llvm::Expected<sql::Statement> erase = c.prepare(query);
      if (!erase)
        return erase.takeError();
      erase->bind(1, key);
      if (llvm::Error error = erase->run())
        return error;
    }
  }
  // auto_vacuum=INCREMENTAL: hand the freed pages back to the file system.
  return victims.empty() ? llvm::Error::success() : c.exec("PRAGMA incremental_vacuum");
}

} // namespace flashjit::cache
