/* faultio: an LD_PRELOAD shim that slows, stalls and forgets a process's disk writes.
 *
 * Theory of operation. Loaded with LD_PRELOAD and configured by the environment:
 *   XCE_FAULTIO_DIR    the control directory (the driver's, soak/faultio/__init__.py)
 *   XCE_FAULTIO_PATHS  path prefixes, ':'-separated; only files under them are affected
 *   XCE_FAULTIO_UNDO   "1": keep an undo journal of unsynced writes (power loss)
 * Without the first two, every wrapper is one test of a flag and the real call.
 *
 * Delays. `<dir>/ctl` holds "fsync_ms=N write_ms=M". It is looked at (stat: inode, mtime and size)
 * at most every CHECK_NS, by whichever call comes first, and re-read when it changed. fsync,
 * fdatasync, msync(MS_SYNC), sync_file_range, sync and syncfs of an affected file sleep fsync_ms
 * before the real call; write, pwrite, writev, pwritev(2) sleep write_ms. A sleep is taken in
 * slices and re-checks the file, so clearing a delay releases the calls already stalled.
 *
 * Power loss (in the spirit of Jepsen's lazyfs). Before each call that changes bytes of an
 * affected regular file (write, pwrite, writev, pwritev(2), ftruncate, truncate, open with
 * O_TRUNC), an undo record goes to this process's journal `<dir>/undo-<pid>-<start>.log` with
 * plain write(): the file (device, inode and path), the offset, the bytes about to be
 * overwritten (those inside the file) and the file's size before. Then the real call runs; one
 * lock covers record and call, so threads writing the same bytes record them in the order they
 * write them. A successful fsync or fdatasync of a file (msync MS_SYNC of its mapping, sync,
 * syncfs of its filesystem) discards the records of that file taken before the sync began:
 * a sync record is appended, or the journal is cut back to its header when nothing is left
 * pending. A write through a descriptor opened with O_DSYNC or O_SYNC (LMDB's meta page), or
 * with RWF_DSYNC, counts as the write and an fdatasync. After the process died (SIGKILL),
 * the driver's power_loss() applies each journal's pending records newest first: pre-images
 * back, size cut back, so every file is as it was when it was last synced. The journal itself
 * is never lost (it lives outside the affected paths and models what the disk did not keep).
 *
 * A journal left by a process that died without a power loss (a plain crash: its writes are
 * still in the page cache, unsynced) is adopted by the next process started on the same
 * directory: its pending records are copied into the new journal, so the new process's syncs
 * discard them as the kernel's would, and a later power loss still drops what was never synced.
 * The journal is compacted (live records copied to a new file, renamed over) when it outgrows
 * XCE_FAULTIO_COMPACT_BYTES (64 MiB) and twice what was live after the last compaction.
 *
 * Not modelled: directory entries (a file created, renamed or unlinked stays so: create,
 * rename, unlink and link are durable at once), writes through shared mappings (LMDB's lock
 * file, rebuilt when the environment is opened; MDB_WRITEMAP is not supported), writes by
 * calls inside libc that bypass the symbol table (stdio's fwrite/fclose), fallocate,
 * copy_file_range, sendfile and splice, and writes from signal handlers. sync_file_range is
 * delayed but syncs nothing (it gives no durability). If a record cannot be written the
 * process carries on and `<dir>/broken-<pid>` says why; power_loss() then refuses.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FD_CACHE 16384                /* descriptors whose classification is remembered */
#define MAX_PREFIXES 16               /* affected path prefixes */
#define MAX_MAPS 256                  /* shared writable mappings of affected files, for msync */
#define MAX_ADOPT 256                 /* dead processes' journals adopted at start */
#define CHECK_NS 50000000L            /* the control file is looked at most this often */
#define SLICE_NS 20000000L            /* a delay sleeps in slices this long */
#define MAX_DELAY_MS 3600000L         /* a delay longer than an hour is taken as an hour */
#define COMPACT_BYTES (64L << 20)     /* the journal is compacted past this size (and 2x live) */
#define REC_MAGIC 0x52494f46u         /* "FOIR" */
#define JOURNAL_MAGIC "FAULTIO1"
#define JOURNAL_VERSION 1u

enum { REC_UNDO = 1, REC_SYNC = 2, REC_SYNC_ALL = 3, REC_SYNC_DEV = 4 };
enum { K_UNKNOWN = 0, K_OTHER = 1, K_FILE = 2, K_DIR = 3 };

/* One journal record: this header, then path_len bytes of path, then data_len bytes of data.
 * UNDO: before a change of [off, off + data_len) (the pre-image, inside the file) of a file of
 * old_size bytes; `length` bytes changed. SYNC: the file's records with seq < off are synced;
 * SYNC_ALL: every file's; SYNC_DEV: those of files on `dev`. Native byte order. */
struct rec {
    uint32_t magic, kind;
    uint64_t total, seq, dev, ino;
    int64_t off, old_size;
    uint64_t length, data_len;
    uint32_t path_len, pad;
};

struct journal_head {
    char magic[8];
    uint32_t version, pid;
    uint64_t start_ticks;
    uint32_t prefixes_len, pad;  /* then the XCE_FAULTIO_PATHS value */
};

struct fd_info { _Atomic uint64_t dev, ino; _Atomic int kind; };
struct pending { uint64_t dev, ino, last_seq, synced_upto; };
struct mapping { uintptr_t start, end; uint64_t dev, ino; };

/* ------------------------------------------------------------------ the real calls */

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);

#define RESOLVE(name) do { if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); } while (0)

static void resolve_all(void) {
    RESOLVE(write); RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(writev); RESOLVE(pwritev);
    RESOLVE(pwritev64); RESOLVE(pwritev2); RESOLVE(pwritev64v2); RESOLVE(ftruncate);
    RESOLVE(ftruncate64); RESOLVE(truncate); RESOLVE(truncate64); RESOLVE(open); RESOLVE(open64);
    RESOLVE(openat); RESOLVE(openat64); RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(msync);
    RESOLVE(sync_file_range); RESOLVE(sync); RESOLVE(syncfs); RESOLVE(mmap); RESOLVE(mmap64);
    RESOLVE(munmap);
}

/* ------------------------------------------------------------------ configuration */

static int g_on;     /* XCE_FAULTIO_DIR and XCE_FAULTIO_PATHS are set */
static int g_track;  /* the undo journal is kept */
static char g_dir[PATH_MAX - 256];  /* room for the names inside it */
static char g_ctl[PATH_MAX];
static char g_paths_raw[8192];
static char g_prefix[MAX_PREFIXES][PATH_MAX];
static size_t g_prefix_len[MAX_PREFIXES];
static int g_nprefix;
static uint64_t g_compact_min = COMPACT_BYTES;

static _Atomic int g_fsync_ms, g_write_ms;
static _Atomic long g_next_check;
static pthread_mutex_t g_ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stat g_ctl_stat;  /* of the control file as last read (under g_ctl_lock) */
static int g_ctl_seen;

static struct fd_info g_fds[FD_CACHE];

/* ------------------------------------------------------------------ undo state (under g_lock) */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_jfd = -1;
static pid_t g_jpid;
static char g_jpath[PATH_MAX];
static uint64_t g_jsize, g_jhead_len, g_compact_at;
static uint64_t g_seq = 1;
static struct pending *g_pend;
static size_t g_npend, g_pend_cap;

static pthread_mutex_t g_map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping g_maps[MAX_MAPS];
static _Atomic int g_nmaps;

/* ------------------------------------------------------------------ small helpers */

static long now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void fd_link(int fd, char out[32]) {
    char digits[16];
    int n = 0;
    unsigned v = (unsigned)fd;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    memcpy(out, "/proc/self/fd/", 14);
    for (int i = 0; i < n; i++) out[14 + i] = digits[n - 1 - i];
    out[14 + n] = '\0';
}

/* The path `fd` is open on ("" if unknown), without the " (deleted)" of an unlinked file. */
static void fd_path(int fd, char *out, size_t size) {
    char link[32];
    fd_link(fd, link);
    ssize_t n = readlink(link, out, size - 1);
    if (n < 0) n = 0;
    out[n] = '\0';
    const char *tail = " (deleted)";
    size_t tl = strlen(tail);
    if ((size_t)n > tl && strcmp(out + n - tl, tail) == 0) out[n - tl] = '\0';
}

static int under_prefix(const char *path) {
    for (int i = 0; i < g_nprefix; i++) {
        size_t len = g_prefix_len[i];
        if (strncmp(path, g_prefix[i], len) != 0) continue;
        if (path[len] == '\0' || path[len] == '/' || (len == 1 && g_prefix[i][0] == '/')) return 1;
    }
    return 0;
}

/* What `fd` is for us: an affected regular file or directory, or something else; `st` filled. */
static int classify(int fd, struct stat *st) {
    if (fd < 0 || fstat(fd, st) != 0) return K_OTHER;
    if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) return K_OTHER;
    struct fd_info *e = fd < FD_CACHE ? &g_fds[fd] : NULL;
    if (e) {
        int kind = atomic_load(&e->kind);
        if (kind != K_UNKNOWN && atomic_load(&e->dev) == (uint64_t)st->st_dev &&
            atomic_load(&e->ino) == (uint64_t)st->st_ino)
            return kind;
    }
    char path[PATH_MAX];
    fd_path(fd, path, sizeof path);
    if (!path[0]) return K_OTHER;
    int kind = !under_prefix(path) ? K_OTHER : S_ISDIR(st->st_mode) ? K_DIR : K_FILE;
    if (e) {
        atomic_store(&e->kind, K_UNKNOWN);
        atomic_store(&e->dev, (uint64_t)st->st_dev);
        atomic_store(&e->ino, (uint64_t)st->st_ino);
        atomic_store(&e->kind, kind);
    }
    return kind;
}

/* The start time of process `pid` (clock ticks since boot, /proc/<pid>/stat field 22); 0 if it
 * is gone or a zombie. */
static uint64_t start_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = real_open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    char state = 0;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ') p++;
        if (!*p) return 0;
        if (field == 3) state = *p;
        if (field == 22) return (state == 'Z' || state == 'X') ? 0 : strtoull(p, NULL, 10);
        while (*p && *p != ' ') p++;
    }
    return 0;
}

static int write_full(int fd, const struct iovec *iov_in, int count) {
    struct iovec iov[4];
    memcpy(iov, iov_in, sizeof(struct iovec) * (size_t)count);
    int i = 0;
    while (i < count) {
        if (iov[i].iov_len == 0) { i++; continue; }
        ssize_t n = real_writev(fd, iov + i, count - i);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        size_t left = (size_t)n;
        while (i < count && left >= iov[i].iov_len) left -= iov[i++].iov_len;
        if (i < count) {
            iov[i].iov_base = (char *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t len, off_t off) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < len) memset((char *)buf + got, 0, len - got);
    return got == len ? 0 : -1;
}

static void broken(const char *why) {
    char path[PATH_MAX + 32], msg[512];
    snprintf(path, sizeof path, "%s/broken-%d", g_dir, (int)getpid());
    int n = snprintf(msg, sizeof msg, "faultio: %s: %s\n", why, strerror(errno));
    int fd = real_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
        struct iovec v = {msg, (size_t)n};
        write_full(fd, &v, 1);
        close(fd);
    }
}

/* ------------------------------------------------------------------ delays */

static int parse_ms(const char *text, const char *key) {
    const char *p = text;
    size_t len = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        if (p == text || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '\t') {
            long v = strtol(p + len, NULL, 10);
            return (int)(v < 0 ? 0 : v > MAX_DELAY_MS ? MAX_DELAY_MS : v);
        }
        p += len;
    }
    return 0;
}

static void read_ctl(void) {
    struct stat st;
    if (stat(g_ctl, &st) != 0) {
        if (g_ctl_seen) {
            g_ctl_seen = 0;
            atomic_store(&g_fsync_ms, 0);
            atomic_store(&g_write_ms, 0);
        }
        return;
    }
    if (g_ctl_seen && st.st_ino == g_ctl_stat.st_ino && st.st_dev == g_ctl_stat.st_dev &&
        st.st_size == g_ctl_stat.st_size && st.st_mtim.tv_sec == g_ctl_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == g_ctl_stat.st_mtim.tv_nsec)
        return;
    int fd = real_open(g_ctl, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return;
    buf[n] = '\0';
    atomic_store(&g_fsync_ms, parse_ms(buf, "fsync_ms="));
    atomic_store(&g_write_ms, parse_ms(buf, "write_ms="));
    g_ctl_stat = st;
    g_ctl_seen = 1;
}

static void refresh(void) {
    long now = now_ns(CLOCK_MONOTONIC_COARSE);
    if (now < atomic_load_explicit(&g_next_check, memory_order_relaxed)) return;
    if (pthread_mutex_trylock(&g_ctl_lock) != 0) return;
    atomic_store(&g_next_check, now + CHECK_NS);
    read_ctl();
    pthread_mutex_unlock(&g_ctl_lock);
}

static void stall(_Atomic int *delay_ms) {
    long start = now_ns(CLOCK_MONOTONIC);
    for (;;) {
        refresh();
        long left = start + (long)atomic_load(delay_ms) * 1000000L - now_ns(CLOCK_MONOTONIC);
        if (left <= 0) return;
        struct timespec t = {0, left < SLICE_NS ? left : SLICE_NS};
        nanosleep(&t, NULL);
    }
}

/* ------------------------------------------------------------------ the undo journal (g_lock) */

static ssize_t pend_find(uint64_t dev, uint64_t ino) {
    for (size_t i = 0; i < g_npend; i++)
        if (g_pend[i].dev == dev && g_pend[i].ino == ino) return (ssize_t)i;
    return -1;
}

static void pend_note(uint64_t dev, uint64_t ino, uint64_t seq) {
    ssize_t i = pend_find(dev, ino);
    if (i >= 0) {
        g_pend[i].last_seq = seq;
        return;
    }
    if (g_npend == g_pend_cap) {
        size_t cap = g_pend_cap ? 2 * g_pend_cap : 16;
        struct pending *p = realloc(g_pend, cap * sizeof *p);
        if (!p) { broken("no memory for the pending table"); return; }
        g_pend = p;
        g_pend_cap = cap;
    }
    g_pend[g_npend++] = (struct pending){dev, ino, seq, seq};
}

static int journal_open(void) {
    pid_t pid = getpid();
    if (g_jfd >= 0 && g_jpid == pid) return 0;
    if (g_jfd >= 0) close(g_jfd);  /* a child forked without our handlers: the parent's */
    g_jfd = -1;
    g_npend = 0;
    uint64_t ticks = start_ticks(pid);
    snprintf(g_jpath, sizeof g_jpath, "%s/undo-%d-%llu.log", g_dir, (int)pid, (unsigned long long)ticks);
    int fd = real_open(g_jpath, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) { broken("cannot create the undo journal"); return -1; }
    struct journal_head h = {{0}, JOURNAL_VERSION, (uint32_t)pid, ticks, (uint32_t)strlen(g_paths_raw), 0};
    memcpy(h.magic, JOURNAL_MAGIC, 8);
    struct iovec v[2] = {{&h, sizeof h}, {g_paths_raw, h.prefixes_len}};
    if (write_full(fd, v, 2) != 0) { broken("cannot write the undo journal"); close(fd); return -1; }
    g_jfd = fd;
    g_jpid = pid;
    g_jhead_len = g_jsize = sizeof h + h.prefixes_len;
    g_compact_at = g_compact_min;
    return 0;
}

static int journal_append(struct rec *r, const char *path, const void *data) {
    if (journal_open() != 0) return -1;
    r->magic = REC_MAGIC;
    r->path_len = path ? (uint32_t)strlen(path) : 0;
    r->total = sizeof *r + r->path_len + r->data_len;
    struct iovec v[3] = {{r, sizeof *r}, {(void *)(path ? path : ""), r->path_len},
                         {(void *)data, (size_t)r->data_len}};
    if (write_full(g_jfd, v, 3) != 0) { broken("cannot append to the undo journal"); return -1; }
    g_jsize += r->total;
    return 0;
}

static void journal_reset(void) {
    if (g_jfd < 0 || g_jpid != getpid()) return;
    if (real_ftruncate(g_jfd, (off_t)g_jhead_len) != 0) { broken("cannot cut the undo journal"); return; }
    g_jsize = g_jhead_len;
}

/* What syncs in journal `fd` say: the seq below which each file's records are synced. */
struct synced { uint64_t all; size_t n, cap; struct { uint64_t dev, ino, upto; int whole_dev; } *e; };

static void synced_add(struct synced *s, uint64_t dev, uint64_t ino, uint64_t upto, int whole_dev) {
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].dev == dev && s->e[i].ino == ino && s->e[i].whole_dev == whole_dev) {
            if (s->e[i].upto < upto) s->e[i].upto = upto;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void *p = realloc(s->e, cap * sizeof *s->e);
        if (!p) return;  /* forgetting a sync keeps more records: power loss drops more */
        s->e = p;
        s->cap = cap;
    }
    s->e[s->n].dev = dev;
    s->e[s->n].ino = ino;
    s->e[s->n].upto = upto;
    s->e[s->n].whole_dev = whole_dev;
    s->n++;
}

static uint64_t synced_upto(const struct synced *s, uint64_t dev, uint64_t ino) {
    uint64_t upto = s->all;
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].dev == dev && (s->e[i].whole_dev || s->e[i].ino == ino) && s->e[i].upto > upto)
            upto = s->e[i].upto;
    return upto;
}

/* Reads the record at `off` of journal `fd` (`size` bytes); 0 at its end or a torn tail. */
static int rec_at(int fd, uint64_t off, uint64_t size, struct rec *r) {
    if (off + sizeof *r > size || read_full(fd, r, sizeof *r, (off_t)off) != 0) return 0;
    if (r->magic != REC_MAGIC || r->total < sizeof *r || off + r->total > size) return 0;
    if (r->total != sizeof *r + r->path_len + r->data_len) return 0;
    return 1;
}

/* Copies the live undo records of journal `src` (from `head_len` to `size`) to `dst`, each with a
 * new seq when `renumber` (adopting another process's journal). Returns the bytes written, or -1. */
static int64_t copy_live(int src, uint64_t head_len, uint64_t size, int dst, int renumber) {
    struct synced s = {0};
    struct rec r;
    for (uint64_t off = head_len; rec_at(src, off, size, &r); off += r.total) {
        if (r.kind == REC_SYNC) synced_add(&s, r.dev, r.ino, (uint64_t)r.off, 0);
        else if (r.kind == REC_SYNC_DEV) synced_add(&s, r.dev, 0, (uint64_t)r.off, 1);
        else if (r.kind == REC_SYNC_ALL && (uint64_t)r.off > s.all) s.all = (uint64_t)r.off;
    }
    int64_t written = 0;
    for (uint64_t off = head_len; rec_at(src, off, size, &r); off += r.total) {
        if (r.kind != REC_UNDO || r.seq < synced_upto(&s, r.dev, r.ino)) continue;
        char *buf = malloc(r.total);
        if (!buf || read_full(src, buf, r.total, (off_t)off) != 0) { free(buf); written = -1; break; }
        if (renumber) {
            r.seq = g_seq++;
            memcpy(buf, &r, sizeof r);
            pend_note(r.dev, r.ino, r.seq);
        }
        struct iovec v = {buf, r.total};
        int rc = write_full(dst, &v, 1);
        free(buf);
        if (rc != 0) { written = -1; break; }
        written += (int64_t)r.total;
    }
    free(s.e);
    return written;
}

static void compact(void) {
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_jpath);
    int fd = real_open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) { broken("cannot compact the undo journal"); return; }
    char *head = malloc(g_jhead_len);
    int64_t live = -1;
    if (head && read_full(g_jfd, head, g_jhead_len, 0) == 0) {
        struct iovec v = {head, g_jhead_len};
        if (write_full(fd, &v, 1) == 0) live = copy_live(g_jfd, g_jhead_len, g_jsize, fd, 0);
    }
    free(head);
    if (live < 0 || rename(tmp, g_jpath) != 0) {
        broken("cannot compact the undo journal");
        close(fd);
        unlink(tmp);
        g_compact_at *= 2;
        return;
    }
    close(g_jfd);
    g_jfd = fd;
    g_jsize = g_jhead_len + (uint64_t)live;
    g_compact_at = 2 * g_jsize > g_compact_min ? 2 * g_jsize : g_compact_min;
}

/* Records that [pre_off, pre_off + pre_len) of fd's file (`st`, `old_size` bytes) is about to
 * change, `length` bytes in all. Under g_lock. */
static void record_undo(int fd, const struct stat *st, int64_t old_size, int64_t pre_off,
                        uint64_t pre_len, uint64_t length) {
    char *pre = NULL;
    if (pre_len) {
        pre = malloc(pre_len);
        if (!pre) { broken("no memory for a pre-image"); return; }
        int flags = fcntl(fd, F_GETFL);
        int rfd = fd;
        if (flags < 0 || (flags & O_ACCMODE) == O_WRONLY) {
            char link[32];
            fd_link(fd, link);
            rfd = real_open(link, O_RDONLY | O_CLOEXEC);
        }
        if (rfd < 0 || read_full(rfd, pre, pre_len, (off_t)pre_off) != 0) broken("cannot read a pre-image");
        if (rfd >= 0 && rfd != fd) close(rfd);
    }
    char path[PATH_MAX];
    fd_path(fd, path, sizeof path);
    struct rec r = {0};
    r.kind = REC_UNDO;
    r.seq = g_seq;
    r.dev = (uint64_t)st->st_dev;
    r.ino = (uint64_t)st->st_ino;
    r.off = pre_off;
    r.old_size = old_size;
    r.length = length;
    r.data_len = pre_len;
    if (journal_append(&r, path, pre) == 0) {
        g_seq++;
        pend_note(r.dev, r.ino, r.seq);
        if (g_jsize > g_compact_at) compact();
    }
    free(pre);
}

/* The records of (dev, ino) taken before seq `upto` are synced. Under g_lock. */
static void synced_file(uint64_t dev, uint64_t ino, uint64_t upto) {
    ssize_t i = pend_find(dev, ino);
    if (i < 0) return;
    if (g_pend[i].last_seq < upto) g_pend[i] = g_pend[--g_npend];
    else if (g_pend[i].synced_upto < upto) g_pend[i].synced_upto = upto;
    if (g_npend == 0) { journal_reset(); return; }
    struct rec r = {0};
    r.kind = REC_SYNC;
    r.dev = dev;
    r.ino = ino;
    r.off = (int64_t)upto;
    journal_append(&r, NULL, NULL);
}

/* Every file's records (or those on device `dev`, when whole_dev) before `upto` are synced. */
static void synced_many(uint64_t dev, int whole_dev, uint64_t upto) {
    size_t kept = 0;
    for (size_t i = 0; i < g_npend; i++) {
        struct pending p = g_pend[i];
        if (whole_dev && p.dev != dev) { g_pend[kept++] = p; continue; }
        if (p.last_seq < upto) continue;
        if (p.synced_upto < upto) p.synced_upto = upto;
        g_pend[kept++] = p;
    }
    g_npend = kept;
    if (g_npend == 0) { journal_reset(); return; }
    struct rec r = {0};
    r.kind = whole_dev ? REC_SYNC_DEV : REC_SYNC_ALL;
    r.dev = dev;
    r.off = (int64_t)upto;
    journal_append(&r, NULL, NULL);
}

static uint64_t sync_begins(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t upto = g_seq;
    pthread_mutex_unlock(&g_lock);
    return upto;
}

/* Dead processes' journals in the control directory become part of this process's. */
static void adopt_dead_journals(void) {
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/lock", g_dir);
    int lock = real_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) return;
    flock(lock, LOCK_EX);
    DIR *dir = opendir(g_dir);
    struct { uint64_t ticks; char name[256]; } found[MAX_ADOPT];
    int n = 0;
    pid_t me = getpid();
    for (struct dirent *d; dir && (d = readdir(dir)) != NULL && n < MAX_ADOPT;) {
        int pid;
        unsigned long long ticks;
        char tail[8];
        if (sscanf(d->d_name, "undo-%d-%llu.%4s", &pid, &ticks, tail) != 3 || strcmp(tail, "log") != 0)
            continue;
        if (pid == me || (ticks && start_ticks(pid) == ticks)) continue;  /* ours, or alive */
        found[n].ticks = ticks;
        snprintf(found[n].name, sizeof found[n].name, "%s", d->d_name);
        n++;
    }
    if (dir) closedir(dir);
    for (int i = 1; i < n; i++)  /* oldest first: their records come before the newer ones' */
        for (int j = i; j > 0 && found[j].ticks < found[j - 1].ticks; j--) {
            __typeof__(found[0]) t = found[j];
            found[j] = found[j - 1];
            found[j - 1] = t;
        }
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, found[i].name);
        int fd = real_open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        struct journal_head h;
        int ok = fstat(fd, &st) == 0 && read_full(fd, &h, sizeof h, 0) == 0 &&
                 memcmp(h.magic, JOURNAL_MAGIC, 8) == 0 && journal_open() == 0;
        int64_t copied = ok ? copy_live(fd, sizeof h + h.prefixes_len, (uint64_t)st.st_size, g_jfd, 1) : -1;
        close(fd);
        if (copied < 0) { broken("cannot adopt a dead process's undo journal"); continue; }
        g_jsize += (uint64_t)copied;
        unlink(path);
    }
    if (g_npend == 0) journal_reset();
    pthread_mutex_unlock(&g_lock);
    flock(lock, LOCK_UN);
    close(lock);
}

/* ------------------------------------------------------------------ setup */

static void fork_prepare(void) { pthread_mutex_lock(&g_lock); pthread_mutex_lock(&g_map_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&g_map_lock); pthread_mutex_unlock(&g_lock); }

static void fork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_map_lock, NULL);
    pthread_mutex_init(&g_ctl_lock, NULL);
    if (g_jfd >= 0) close(g_jfd);  /* the parent's journal; the child starts its own when it writes */
    g_jfd = -1;
    g_jpid = 0;
    g_npend = 0;
}

static void add_prefix(const char *p, size_t len) {
    if (len == 0 || len >= PATH_MAX || g_nprefix == MAX_PREFIXES) return;
    char raw[PATH_MAX], *dst = g_prefix[g_nprefix];
    memcpy(raw, p, len);
    raw[len] = '\0';
    if (!realpath(raw, dst)) memcpy(dst, raw, len + 1);
    size_t n = strlen(dst);
    while (n > 1 && dst[n - 1] == '/') dst[--n] = '\0';
    g_prefix_len[g_nprefix++] = n;
}

__attribute__((constructor)) static void faultio_init(void) {
    resolve_all();
    const char *dir = getenv("XCE_FAULTIO_DIR"), *paths = getenv("XCE_FAULTIO_PATHS");
    if (!dir || !*dir || !paths || !*paths || strlen(dir) >= sizeof g_dir ||
        strlen(paths) >= sizeof g_paths_raw)
        return;
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    snprintf(g_ctl, sizeof g_ctl, "%s/ctl", dir);
    snprintf(g_paths_raw, sizeof g_paths_raw, "%s", paths);
    for (const char *p = paths; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        add_prefix(p, len);
        p += len + (end ? 1 : 0);
    }
    const char *undo = getenv("XCE_FAULTIO_UNDO"), *compact_bytes = getenv("XCE_FAULTIO_COMPACT_BYTES");
    g_track = undo && strcmp(undo, "1") == 0;
    if (compact_bytes && atoll(compact_bytes) > 0) g_compact_min = (uint64_t)atoll(compact_bytes);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    read_ctl();
    atomic_store(&g_next_check, now_ns(CLOCK_MONOTONIC_COARSE) + CHECK_NS);
    g_on = 1;
    if (g_track) adopt_dead_journals();
}

/* ------------------------------------------------------------------ writes */

struct wctx { int locked, dsync; struct stat st; };

/* Before a write of `n` bytes at `pos` (-1: the file position) to fd: delay it, record its undo.
 * Leaves g_lock held when c->locked; after_write releases it. */
static void before_write(int fd, int64_t pos, uint64_t n, int rwf, struct wctx *c) {
    c->locked = 0;
    refresh();
    int delay = atomic_load(&g_write_ms);
    if (!g_track && !delay) return;
    if (classify(fd, &c->st) != K_FILE) return;
    if (delay) stall(&g_write_ms);
    if (!g_track) return;
    pthread_mutex_lock(&g_lock);
    c->locked = 1;
    int flags = fcntl(fd, F_GETFL);
    c->dsync = (flags >= 0 && (flags & O_DSYNC)) || (rwf & (RWF_DSYNC | RWF_SYNC));
    if (fstat(fd, &c->st) != 0 || n == 0) return;
    int64_t size = c->st.st_size;
    int64_t off = (flags >= 0 && (flags & O_APPEND)) || (rwf & RWF_APPEND) ? size
                : pos >= 0 ? pos : (int64_t)lseek(fd, 0, SEEK_CUR);
    if (off < 0) return;
    uint64_t pre = off < size ? ((uint64_t)(size - off) < n ? (uint64_t)(size - off) : n) : 0;
    record_undo(fd, &c->st, size, off, pre, n);
}

static void after_write(struct wctx *c, ssize_t result) {
    if (!c->locked) return;
    int saved = errno;
    if (c->dsync && result >= 0) synced_file((uint64_t)c->st.st_dev, (uint64_t)c->st.st_ino, g_seq);
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}

static uint64_t iov_bytes(const struct iovec *iov, int count) {
    uint64_t n = 0;
    for (int i = 0; i < count; i++) n += iov[i].iov_len;
    return n;
}

#define WRITE_BODY(call, fd, pos, n, rwf)                 \
    do {                                                  \
        if (!g_on) return call;                           \
        struct wctx c;                                    \
        before_write(fd, pos, n, rwf, &c);                \
        ssize_t result = call;                            \
        after_write(&c, result);                          \
        return result;                                    \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    RESOLVE(write);
    WRITE_BODY(real_write(fd, buf, n), fd, -1, n, 0);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    RESOLVE(pwrite);
    WRITE_BODY(real_pwrite(fd, buf, n, off), fd, off, n, 0);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    RESOLVE(pwrite64);
    WRITE_BODY(real_pwrite64(fd, buf, n, off), fd, off, n, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    RESOLVE(writev);
    WRITE_BODY(real_writev(fd, iov, count), fd, -1, iov_bytes(iov, count), 0);
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t off) {
    RESOLVE(pwritev);
    WRITE_BODY(real_pwritev(fd, iov, count, off), fd, off, iov_bytes(iov, count), 0);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t off) {
    RESOLVE(pwritev64);
    WRITE_BODY(real_pwritev64(fd, iov, count, off), fd, off, iov_bytes(iov, count), 0);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t off, int flags) {
    RESOLVE(pwritev2);
    if (!real_pwritev2) { errno = ENOSYS; return -1; }
    WRITE_BODY(real_pwritev2(fd, iov, count, off, flags), fd, off, iov_bytes(iov, count), flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t off, int flags) {
    RESOLVE(pwritev64v2);
    if (!real_pwritev64v2) { errno = ENOSYS; return -1; }
    WRITE_BODY(real_pwritev64v2(fd, iov, count, off, flags), fd, off, iov_bytes(iov, count), flags);
}

/* ------------------------------------------------------------------ truncation */

/* Before fd's file is cut or grown to `len`: record what goes. Returns with g_lock held if 1. */
static int before_truncate(int fd, off_t len) {
    if (!g_on || !g_track) return 0;
    struct stat st;
    if (classify(fd, &st) != K_FILE) return 0;
    pthread_mutex_lock(&g_lock);
    if (fstat(fd, &st) == 0 && len != st.st_size && len >= 0) {
        int64_t size = st.st_size;
        uint64_t cut = len < size ? (uint64_t)(size - len) : 0;
        record_undo(fd, &st, size, len, cut, len < size ? cut : (uint64_t)(len - size));
    }
    return 1;
}

static int end_locked(int locked, int result) {
    if (locked) {
        int saved = errno;
        pthread_mutex_unlock(&g_lock);
        errno = saved;
    }
    return result;
}

int ftruncate(int fd, off_t len) {
    RESOLVE(ftruncate);
    int locked = before_truncate(fd, len);
    return end_locked(locked, real_ftruncate(fd, len));
}

int ftruncate64(int fd, off_t len) {
    RESOLVE(ftruncate64);
    int locked = before_truncate(fd, len);
    return end_locked(locked, real_ftruncate64(fd, len));
}

static int truncate_path(int (*real)(const char *, off_t), const char *path, off_t len) {
    if (!g_on || !g_track) return real(path, len);
    int fd = real_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int locked = fd >= 0 ? before_truncate(fd, len) : 0;
    int result = real(path, len);
    end_locked(locked, result);
    if (fd >= 0) close(fd);
    return result;
}

int truncate(const char *path, off_t len) {
    RESOLVE(truncate);
    return truncate_path(real_truncate, path, len);
}

int truncate64(const char *path, off_t len) {
    RESOLVE(truncate64);
    return truncate_path(real_truncate64, path, len);
}

/* ------------------------------------------------------------------ opening (O_TRUNC) */

static int has_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

/* An open that may truncate an existing affected file: its contents are recorded first. */
static int open_truncating(int dirfd, const char *path, int flags, mode_t mode, int at) {
    int pre = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;  /* never blocks on a FIFO */
    int rfd = at ? real_openat(dirfd, path, pre) : real_open(path, pre);
    int locked = rfd >= 0 ? before_truncate(rfd, 0) : 0;
    int fd = at ? real_openat(dirfd, path, flags, mode) : real_open(path, flags, mode);
    end_locked(locked, fd);
    if (rfd >= 0) {
        int saved = errno;
        close(rfd);
        errno = saved;
    }
    return fd;
}

static int tracks_truncation(int flags) {
    return g_on && g_track && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY;
}

#define OPEN_BODY(real, at, dirfd, path, flags)                                   \
    do {                                                                          \
        mode_t mode = 0;                                                          \
        if (has_mode(flags)) {                                                    \
            va_list ap;                                                           \
            va_start(ap, flags);                                                  \
            mode = (mode_t)va_arg(ap, int);                                       \
            va_end(ap);                                                           \
        }                                                                         \
        if (tracks_truncation(flags)) return open_truncating(dirfd, path, flags, mode, at); \
        return at ? real_openat(dirfd, path, flags, mode) : real(path, flags, mode); \
    } while (0)

int open(const char *path, int flags, ...) {
    RESOLVE(open);
    RESOLVE(openat);
    OPEN_BODY(real_open, 0, AT_FDCWD, path, flags);
}

int open64(const char *path, int flags, ...) {
    RESOLVE(open64);
    RESOLVE(openat);
    RESOLVE(open);
    OPEN_BODY(real_open64, 0, AT_FDCWD, path, flags);
}

int openat(int dirfd, const char *path, int flags, ...) {
    RESOLVE(openat);
    RESOLVE(open);
    OPEN_BODY(real_open, 1, dirfd, path, flags);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    RESOLVE(openat64);
    RESOLVE(openat);
    RESOLVE(open);
    OPEN_BODY(real_open, 1, dirfd, path, flags);
}

int creat(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open(path, flags); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }
int __openat64_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }

/* ------------------------------------------------------------------ syncs */

static int file_sync(int (*real)(int), int fd) {
    if (!g_on) return real(fd);
    refresh();
    int delay = atomic_load(&g_fsync_ms);
    if (!g_track && !delay) return real(fd);
    struct stat st;
    int kind = classify(fd, &st);
    if (kind == K_OTHER) return real(fd);
    if (delay) stall(&g_fsync_ms);
    if (!g_track || kind != K_FILE) return real(fd);
    uint64_t upto = sync_begins();
    int result = real(fd);
    if (result == 0) {
        int saved = errno;
        pthread_mutex_lock(&g_lock);
        synced_file((uint64_t)st.st_dev, (uint64_t)st.st_ino, upto);
        pthread_mutex_unlock(&g_lock);
        errno = saved;
    }
    return result;
}

int fsync(int fd) {
    RESOLVE(fsync);
    return file_sync(real_fsync, fd);
}

int fdatasync(int fd) {
    RESOLVE(fdatasync);
    return file_sync(real_fdatasync, fd);
}

int sync_file_range(int fd, off_t off, off_t n, unsigned int flags) {
    RESOLVE(sync_file_range);
    if (g_on) {
        refresh();
        struct stat st;
        if (atomic_load(&g_fsync_ms) && classify(fd, &st) != K_OTHER) stall(&g_fsync_ms);
    }
    return real_sync_file_range(fd, off, n, flags);
}

void sync(void) {
    RESOLVE(sync);
    if (!g_on) { real_sync(); return; }
    refresh();
    if (atomic_load(&g_fsync_ms)) stall(&g_fsync_ms);
    uint64_t upto = g_track ? sync_begins() : 0;
    real_sync();
    if (!g_track) return;
    int saved = errno;
    pthread_mutex_lock(&g_lock);
    synced_many(0, 0, upto);
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}

int syncfs(int fd) {
    RESOLVE(syncfs);
    if (!g_on) return real_syncfs(fd);
    refresh();
    struct stat st;
    if (fstat(fd, &st) != 0) return real_syncfs(fd);
    if (atomic_load(&g_fsync_ms)) stall(&g_fsync_ms);
    uint64_t upto = g_track ? sync_begins() : 0;
    int result = real_syncfs(fd);
    if (g_track && result == 0) {
        int saved = errno;
        pthread_mutex_lock(&g_lock);
        synced_many((uint64_t)st.st_dev, 1, upto);
        pthread_mutex_unlock(&g_lock);
        errno = saved;
    }
    return result;
}

/* ------------------------------------------------------------------ mappings (msync) */

static void *mapped(void *p, size_t len, int prot, int flags, int fd) {
    if (p == MAP_FAILED || !g_on || fd < 0 || !(flags & MAP_SHARED) || !(prot & PROT_WRITE)) return p;
    struct stat st;
    if (classify(fd, &st) != K_FILE) return p;
    pthread_mutex_lock(&g_map_lock);
    int n = atomic_load(&g_nmaps);
    if (n < MAX_MAPS) {
        g_maps[n] = (struct mapping){(uintptr_t)p, (uintptr_t)p + len, (uint64_t)st.st_dev, (uint64_t)st.st_ino};
        atomic_store(&g_nmaps, n + 1);
    }
    pthread_mutex_unlock(&g_map_lock);
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = real_mmap ? real_mmap(addr, len, prot, flags, fd, off)
                        : (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return mapped(p, len, prot, flags, fd);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = real_mmap64 ? real_mmap64(addr, len, prot, flags, fd, off)
                          : (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return mapped(p, len, prot, flags, fd);
}

int munmap(void *addr, size_t len) {
    if (atomic_load(&g_nmaps)) {
        uintptr_t start = (uintptr_t)addr, end = start + len;
        pthread_mutex_lock(&g_map_lock);
        int n = atomic_load(&g_nmaps), kept = 0;
        for (int i = 0; i < n; i++)
            if (g_maps[i].end <= start || g_maps[i].start >= end) g_maps[kept++] = g_maps[i];
        atomic_store(&g_nmaps, kept);
        pthread_mutex_unlock(&g_map_lock);
    }
    if (!real_munmap) return (int)syscall(SYS_munmap, addr, len);
    return real_munmap(addr, len);
}

int msync(void *addr, size_t len, int flags) {
    RESOLVE(msync);
    if (!g_on || !(flags & MS_SYNC) || !atomic_load(&g_nmaps)) return real_msync(addr, len, flags);
    uintptr_t start = (uintptr_t)addr, end = start + len;
    struct mapping found = {0};
    pthread_mutex_lock(&g_map_lock);
    int n = atomic_load(&g_nmaps);
    for (int i = 0; i < n && !found.end; i++)
        if (g_maps[i].end > start && g_maps[i].start < end) found = g_maps[i];
    pthread_mutex_unlock(&g_map_lock);
    if (!found.end) return real_msync(addr, len, flags);
    refresh();
    if (atomic_load(&g_fsync_ms)) stall(&g_fsync_ms);
    uint64_t upto = g_track ? sync_begins() : 0;
    int result = real_msync(addr, len, flags);
    if (g_track && result == 0) {
        int saved = errno;
        pthread_mutex_lock(&g_lock);
        synced_file(found.dev, found.ino, upto);
        pthread_mutex_unlock(&g_lock);
        errno = saved;
    }
    return result;
}
