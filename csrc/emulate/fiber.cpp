#include "emulate/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace chiplet_fa::emu {
namespace {

size_t page_bytes() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

#if !defined(CHIPLET_FA_EMU_UCONTEXT)
// cfa_emu_switch(save, load): pushes the callee-saved registers (System V x86-64 ABI) and the
// floating-point control state, stores the stack pointer to *save, loads `load` as the stack
// pointer and pops the same frame from there. A new fiber's stack holds such a frame whose
// return address is cfa_emu_trampoline, with the entry function in r12 and its argument in rbx.
extern "C" void cfa_emu_switch(void** save, void* load);
extern "C" void cfa_emu_trampoline();
asm(R"(
  .text
  .p2align 4
  .globl cfa_emu_switch
  .hidden cfa_emu_switch
  .type cfa_emu_switch, @function
cfa_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cfa_emu_switch, .-cfa_emu_switch

  .p2align 4
  .globl cfa_emu_trampoline
  .hidden cfa_emu_trampoline
  .type cfa_emu_trampoline, @function
cfa_emu_trampoline:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size cfa_emu_trampoline, .-cfa_emu_trampoline
)");
#endif

Fiber::Fiber() {
  const size_t guard = page_bytes();
  void* p = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("chiplet_fa emulator: cannot map a fiber stack");
  mapping_ = static_cast<unsigned char*>(p);
  mprotect(mapping_, guard, PROT_NONE);
}

Fiber::~Fiber() { munmap(mapping_, page_bytes() + kStackBytes); }

void Fiber::main(void* self) {
  auto* f = static_cast<Fiber*>(self);
  f->entry_(f->arg_);
  f->finished_ = true;
  f->suspend();
  std::abort();  // a finished fiber is never resumed
}

void Fiber::start(Entry entry, void* arg) {
  entry_ = entry;
  arg_ = arg;
  finished_ = false;
  unsigned char* top = mapping_ + page_bytes() + kStackBytes;  // page aligned, so 16-byte aligned
#if defined(CHIPLET_FA_EMU_UCONTEXT)
  getcontext(&context_);
  context_.uc_stack.ss_sp = mapping_ + page_bytes();
  context_.uc_stack.ss_size = kStackBytes;
  context_.uc_link = nullptr;
  // makecontext passes int arguments only: the fiber pointer travels in two halves.
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&context_, reinterpret_cast<void (*)()>(+[](unsigned hi, unsigned lo) {
                Fiber::main(reinterpret_cast<void*>(uintptr_t(hi) << 32 | lo));
              }),
              2, unsigned(self >> 32), unsigned(self));
  (void)top;
#else
  // The frame cfa_emu_switch pops: FP control, r15, r14, r13, r12, rbx, rbp, return address;
  // then 16 bytes so that the trampoline starts with a 16-byte aligned stack (its call then
  // leaves the entry function the ABI's alignment).
  auto* frame = reinterpret_cast<uint64_t*>(top - 80);
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  std::memset(frame, 0, 80);
  frame[0] = uint64_t(mxcsr) | uint64_t(fpucw) << 32;
  frame[4] = reinterpret_cast<uint64_t>(&Fiber::main);  // r12
  frame[5] = reinterpret_cast<uint64_t>(this);          // rbx
  frame[7] = reinterpret_cast<uint64_t>(&cfa_emu_trampoline);
  sp_ = frame;
#endif
}

void Fiber::resume() {
#if defined(CHIPLET_FA_EMU_UCONTEXT)
  swapcontext(&caller_, &context_);
#else
  cfa_emu_switch(&caller_sp_, sp_);
#endif
}

void Fiber::suspend() {
#if defined(CHIPLET_FA_EMU_UCONTEXT)
  swapcontext(&context_, &caller_);
#else
  cfa_emu_switch(&sp_, caller_sp_);
#endif
}

}  // namespace chiplet_fa::emu
