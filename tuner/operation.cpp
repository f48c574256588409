#include "tuner/operation.h"

namespace flashjit::tuner {

const Operation &operationFor(generator::Family family) {
  switch (generator::operationOf(family)) {
  case generator::Operation::Forward: return forwardOperation();
  case generator::Operation::Backward: return backwardOperation();
  case generator::Operation::Decode: return decodeOperation();
  }
  return forwardOperation();
}

double usefulTflops(const generator::KernelSpec &spec, const ForwardShape &shape, double us) {
  return us > 0 ? operationFor(spec.family).flops(spec, shape) / (us * 1e-6) / 1e12 : 0;
}

} // namespace flashjit::tuner
