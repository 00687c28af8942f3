/* A companion to libfaketime 0.9.10 (Debian bookworm), loaded before it, for soak/clockfault.py.
 *
 * With FAKETIME_DONT_FAKE_MONOTONIC=1 that libfaketime mishandles two waits on the monotonic clock
 * (wolfcw/libfaketime#426): clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...), which Python 3.11's
 * time.sleep uses, fails with EINVAL, and pthread_cond_timedwait on a condition variable set to
 * CLOCK_MONOTONIC (the GIL's, gRPC core's) times out at once, a busy loop. Both waits are passed
 * here to the kernel and glibc untouched; waits on the wall clock still go to libfaketime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

static int wall(clockid_t clock_id) {
    return clock_id == CLOCK_REALTIME || clock_id == CLOCK_REALTIME_COARSE || clock_id == CLOCK_TAI;
}

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *request, struct timespec *remain) {
    if (!wall(clock_id)) {
        return syscall(SYS_clock_nanosleep, clock_id, flags, request, remain) == 0 ? 0 : errno;
    }
    static clock_nanosleep_fn next;
    if (next == NULL) {
        next = (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    return next(clock_id, flags, request, remain);
}

/* glibc 2.25 and later keep a condition variable's clock in bit 1 of __wrefs (0: CLOCK_REALTIME, 1:
 * CLOCK_MONOTONIC; pthread_condattr_setclock); bit 0 says process-shared. */
int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime) {
    if (cond->__data.__wrefs & 2) {
        return pthread_cond_clockwait(cond, mutex, CLOCK_MONOTONIC, abstime);
    }
    static cond_timedwait_fn next;
    if (next == NULL) {
        next = (cond_timedwait_fn)dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
        if (next == NULL) {
            next = (cond_timedwait_fn)dlsym(RTLD_NEXT, "pthread_cond_timedwait");
        }
    }
    return next(cond, mutex, abstime);
}
