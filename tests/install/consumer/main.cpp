// An outside program built against the installed wallfacer package (find_package).
#include <wallfacer/wallfacer.h>

#include <cstdio>

int main() {
  wf::Tensor t = wf::Tensor::arange(0, 6).view({2, 3});
  double sum = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) sum += t.at(i);
  std::printf("wallfacer %s consumer: %s sum=%g\n", WF_VERSION, wf::shape_str(t.shape()).c_str(), sum);
  return sum == 15.0 ? 0 : 1;
}
