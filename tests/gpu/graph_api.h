// The CUDA graph entry points the GPU API tests capture and replay with (runtime/ does
// not wrap them), loaded from the driver by the versioned names cuda.h's macros give them.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#define FJ_GRAPH_STRINGIFY2(x) #x
#define FJ_GRAPH_STRINGIFY(x) FJ_GRAPH_STRINGIFY2(x)

struct GraphApi {
  decltype(&::cuStreamBeginCapture) beginCapture = nullptr;
  decltype(&::cuStreamEndCapture) endCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) instantiate = nullptr;
  decltype(&::cuGraphLaunch) launch = nullptr;
  decltype(&::cuGraphExecDestroy) execDestroy = nullptr;
  decltype(&::cuGraphDestroy) destroy = nullptr;

  static GraphApi load() {
    GraphApi api;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return api;
#define FJ_GRAPH_LOAD(member, fn)                                                        \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(lib, FJ_GRAPH_STRINGIFY(fn)))
    FJ_GRAPH_LOAD(beginCapture, cuStreamBeginCapture);
    FJ_GRAPH_LOAD(endCapture, cuStreamEndCapture);
    FJ_GRAPH_LOAD(instantiate, cuGraphInstantiateWithFlags);
    FJ_GRAPH_LOAD(launch, cuGraphLaunch);
    FJ_GRAPH_LOAD(execDestroy, cuGraphExecDestroy);
    FJ_GRAPH_LOAD(destroy, cuGraphDestroy);
#undef FJ_GRAPH_LOAD
    return api;
  }
  bool complete() const {
    return beginCapture && endCapture && instantiate && launch && execDestroy && destroy;
  }
};

