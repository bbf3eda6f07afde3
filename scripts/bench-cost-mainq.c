/* Preloaded into the processes scripts/bench-cost counts under callgrind (never into anything else).
 *
 * A Swift `async` main ends in libdispatch's dispatch_main(), which exits the main thread with pthread_exit and parks it
 * in a thread-specific-data destructor; valgrind 3.19 (Debian 12) dies of a SIGSEGV of its own at the next thread the
 * process creates ("VALGRIND INTERNAL ERROR"), so no Swift server can be counted as it is. This dispatch_main keeps the
 * main thread instead and serves the main queue on it the way CoreFoundation's run loop does: wait on the queue's
 * eventfd, then drain it. The program's own code is the same binary, instruction for instruction. */
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

extern uintptr_t _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *message);

void dispatch_main(void) {
    int fd = (int)_dispatch_get_main_queue_handle_4CF();
    for (;;) {
        struct pollfd ready = {.fd = fd, .events = POLLIN};
        if (poll(&ready, 1, -1) > 0) {
            uint64_t count;
            (void)!read(fd, &count, sizeof count);
        }
        _dispatch_main_queue_callback_4CF(0);
    }
}
