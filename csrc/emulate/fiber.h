// A fiber: a user-level thread with its own stack, switched to and from explicitly. The emulator
// runs every work-item (GPU thread) of a workgroup on its own fiber, so a kernel can stop in the
// middle of its code at a barrier or a wave operation and resume there once the other threads
// have caught up, as a hardware wave does. Fibers never migrate between host threads.
//
// The switch is a few instructions of x86-64 assembly (callee-saved registers, MXCSR and the x87
// control word); elsewhere, or with CHIPLET_FA_EMU_UCONTEXT defined, it is swapcontext, which
// also saves the signal mask with a system call and is about 10x slower (a resume/suspend round
// trip on the 2-core build machine: 20-50 ns against 500 ns).
#pragma once
#include <cstddef>

#if !defined(__x86_64__) && !defined(CHIPLET_FA_EMU_UCONTEXT)
#define CHIPLET_FA_EMU_UCONTEXT 1
#endif
#if defined(CHIPLET_FA_EMU_UCONTEXT)
#include <ucontext.h>
#endif

namespace chiplet_fa::emu {

class Fiber {
 public:
  using Entry = void (*)(void* arg);
  // Usable stack; a guard page below it turns an overflow into a fault instead of corruption.
  static constexpr size_t kStackBytes = 128 * 1024;

  Fiber();
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Makes the next resume() run entry(arg) from the top of the stack. A fiber abandoned in the
  // middle of its entry (the workgroup failed) can be started again: nothing on its stack is
  // destroyed, so the code that ran there must hold only trivially destructible objects.
  void start(Entry entry, void* arg);
  // Runs the fiber until it calls suspend() or its entry returns (then finished() is true).
  void resume();
  // On the fiber: back to the resume() that ran it.
  void suspend();
  bool finished() const { return finished_; }

 private:
  static void main(void* self);

  unsigned char* mapping_ = nullptr;  // guard page, then the stack
  Entry entry_ = nullptr;
  void* arg_ = nullptr;
  bool finished_ = false;
#if defined(CHIPLET_FA_EMU_UCONTEXT)
  ucontext_t context_, caller_;
#else
  void* sp_ = nullptr;         // saved stack pointer of the suspended fiber
  void* caller_sp_ = nullptr;  // ... of the code that resumed it
#endif
};

}  // namespace chiplet_fa::emu
