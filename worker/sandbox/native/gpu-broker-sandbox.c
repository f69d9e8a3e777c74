/*
 * gpu-broker-sandbox: the native per-task sandbox (ADR 0038), a drop-in for the subset of bubblewrap that
 * worker/sandbox/bwrap.ts uses, plus the uid drop and the task's exact environment that a root bwrap
 * leaves to setpriv and env. One short-lived root process per task, like bwrap; no resident helper.
 *
 *   gpu-broker-sandbox --args FD -- COMMAND [ARG...]
 *
 * FD holds the options, each ended by a NUL, in bwrap's syntax (read to its end before anything else: the
 * worker moves this process into the task's cgroup first). Options:
 *
 *   --die-with-parent --new-session --unshare-pid --unshare-ipc --unshare-uts --unshare-net
 *   --unshare-cgroup-try --hostname NAME --json-status-fd FD --chdir DIR
 *   --ro-bind SRC DEST --bind SRC DEST --dev-bind SRC DEST --tmpfs DEST --proc DEST --dev DEST
 *   --dir DEST --symlink TARGET DEST --perms OCTAL --size BYTES      (as bwrap, applied in order)
 *   --uid UID --gid GID      the task's identity (required, not 0): no groups, no capabilities in any
 *                            set, no_new_privs; the drop happens in the process that then execs the task
 *   --setenv NAME VALUE      the task's environment is exactly these (nothing of this program's own)
 *   --seccomp-bpf HEX        the task's syscall filter (worker/sandbox/seccomp.ts), installed in the task's
 *                            own process after the drop, just before its exec
 *   --cgroup-procs FILE      a cgroup's `cgroup.procs` (repeatable, one per v1 controller): this process
 *                            moves itself in first of all, before it clones or mounts anything, so the
 *                            sandbox and all it starts are born in the task's cgroups (the worker then
 *                            need not move it, nor hold its options back until it has)
 *
 * Why it is faster than bwrap + setpriv + env (9–10 ms of machine CPU per task on the CI host): it is
 * one static program, the sources are cloned as detached mount trees (open_tree) and made read-only
 * with one call each (mount_setattr, recursive) instead of re-reading /proc/self/mountinfo after every
 * bind, and the uid drop and env need no further exec. Linux >= 5.12 (mount_setattr).
 *
 * How: every source is cloned (OPEN_TREE_CLONE | AT_RECURSIVE) and given its flags (nosuid; nodev but
 * for --dev-bind; read-only for --ro-bind; private propagation) while this process still sees the host.
 * Then one clone() makes the new PID, mount, IPC, UTS, network and cgroup namespaces; the child (PID 1
 * there) waits for the parent to have written the status, mounts an empty tmpfs, pivots into it and
 * detaches the old root, so from then on the host's tree is out of reach and every destination is
 * resolved inside the new root only. It attaches the clones and makes the mounts in option order, makes
 * the root itself read-only, forks the task (new session, the drop, exec) and stays as its init: when the
 * task's first process exits, the init exits with its status and the kernel kills the rest of the
 * namespace. The parent reports {"child-pid", "*-namespace"} then {"exit-code"} on the status fd as bwrap
 * does, and exits with the task's status (a signal death as 128 + the signal).
 *
 * The task never holds a descriptor of ours: everything but stdin, stdout and stderr is closed before
 * its exec (the status pipe in the init at once: a task that could write it could name another pid).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_SYMLINKS
#define MOVE_MOUNT_T_SYMLINKS 0x00000010
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef KEYCTL_JOIN_SESSION_KEYRING
#define KEYCTL_JOIN_SESSION_KEYRING 1
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

struct mount_attr_v0 {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};

#define MAX_OPTIONS_BYTES (16 * 1024 * 1024)

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die_errno(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void vreport(const char *fmt, va_list ap, int err) {
  char msg[4096];
  int n = snprintf(msg, sizeof msg, "gpu-broker-sandbox: ");
  n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  if (n > (int)sizeof msg - 200) n = (int)sizeof msg - 200;
  if (err != 0) n += snprintf(msg + n, sizeof msg - (size_t)n, ": %s", strerror(err));
  msg[n++] = '\n';
  ssize_t w = write(2, msg, (size_t)n);
  (void)w;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap, 0);
  va_end(ap);
  _exit(1);
}

static void die_errno(const char *fmt, ...) {
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap, err);
  va_end(ap);
  _exit(1);
}

/* ---- options ---- */

enum op_kind { OP_RO_BIND, OP_BIND, OP_DEV_BIND, OP_TMPFS, OP_PROC, OP_DEV, OP_DIR, OP_SYMLINK };

struct op {
  enum op_kind kind;
  const char *src; /* bind source (host path) or symlink target */
  const char *dest;
  int has_perms;
  mode_t perms;
  int has_size;
  unsigned long long size;
  int tree; /* the detached clone of src (binds) */
};

static const char *const DEV_NODES[] = {"null", "zero", "full", "random", "urandom", "tty"};
#define N_DEV_NODES (sizeof DEV_NODES / sizeof DEV_NODES[0])

struct config {
  int die_with_parent, new_session, unshare_pid, unshare_ipc, unshare_uts, unshare_net, unshare_cgroup_try;
  const char *hostname;
  int status_fd;
  const char *chdir_path;
  long long uid, gid;
  struct op *ops;
  size_t n_ops;
  char **env; /* NAME=VALUE, NULL-ended */
  size_t n_env;
  char **cgroup_procs; /* NULL-ended */
  size_t n_cgroup_procs;
  char *const *argv;
  int dev_trees[N_DEV_NODES]; /* the host's /dev/null… for --dev, -1 where the host has none */
  mode_t umask;               /* the caller's, given back to the task (the mounts are made with 0) */
  unsigned char *seccomp;     /* the task's syscall filter (struct sock_filter[]), or NULL */
  size_t seccomp_len;         /* its length in bytes, a multiple of 8 */
};

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) die("out of memory");
  return p;
}

/* A uid or gid: 1 to 4294967294 (0 is root, 4294967295 is (uid_t)-1, "no change" to setresuid). */
static long long parse_id(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *s < '0' || *s > '9' || *end != '\0' || v == 0 || v > 4294967294ULL)
    die("%s must be an id from 1 to 4294967294 (the task never runs as root), not \"%s\"", what, s);
  return (long long)v;
}

static int parse_fd(const char *s, const char *what) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *s == '\0' || *end != '\0' || v < 0 || v > 1 << 20) die("%s: not a descriptor: \"%s\"", what, s);
  return (int)v;
}

/* The most instructions a classic BPF program may have (BPF_MAXINSNS). */
#define MAX_BPF_INSNS 4096

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* --seccomp-bpf HEX: the filter's instructions, 8 bytes each, as lower-case hex (worker/sandbox/seccomp.ts). */
static void parse_seccomp(struct config *cfg, const char *hex) {
  size_t n = strlen(hex);
  if (cfg->seccomp != NULL) die("--seccomp-bpf given twice");
  if (n == 0 || n % 16 != 0 || n / 16 > MAX_BPF_INSNS)
    die("--seccomp-bpf: not a filter of 1 to %d instructions in hex", MAX_BPF_INSNS);
  cfg->seccomp = xcalloc(n / 2, 1);
  for (size_t i = 0; i < n; i += 2) {
    int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) die("--seccomp-bpf: not hex");
    cfg->seccomp[i / 2] = (unsigned char)(hi << 4 | lo);
  }
  cfg->seccomp_len = n / 2;
}

/* Installs the task's syscall filter: the last thing before the exec, after the uid drop and no_new_privs
   (so it needs no privilege) and after the keyring join (made before the drop, see main). */
static void install_seccomp(const struct config *cfg) {
  if (cfg->seccomp == NULL) return;
  struct sock_fprog prog = {.len = (unsigned short)(cfg->seccomp_len / 8),
                            .filter = (struct sock_filter *)cfg->seccomp};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) die_errno("installing the syscall filter");
}

static char *read_all(int fd, size_t *len) {
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  if (buf == NULL) die("out of memory");
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_OPTIONS_BYTES) die("options over %d bytes", MAX_OPTIONS_BYTES);
      cap *= 2;
      buf = realloc(buf, cap);
      if (buf == NULL) die("out of memory");
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die_errno("reading the options");
    if (r == 0) break;
    n += (size_t)r;
  }
  *len = n;
  return buf;
}

static int is_absolute_clean(const char *p) {
  /* An absolute path without "." or ".." components: destinations and sources are the worker's own. */
  if (p[0] != '/') return 0;
  for (const char *c = p; *c != '\0';) {
    while (*c == '/') c++;
    const char *e = strchrnul(c, '/');
    size_t len = (size_t)(e - c);
    if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) return 0;
    c = e;
  }
  return 1;
}

static void parse_options(struct config *cfg, char *data, size_t len) {
  if (len > 0 && data[len - 1] != '\0') die("the options do not end with a NUL byte");
  size_t count = 0;
  for (size_t i = 0; i < len; i++)
    if (data[i] == '\0') count++;
  char **words = xcalloc(count + 1, sizeof *words);
  for (size_t i = 0, w = 0; i < len; w++) {
    words[w] = data + i;
    i += strlen(data + i) + 1;
  }
  cfg->ops = xcalloc(count + 1, sizeof *cfg->ops);
  cfg->env = xcalloc(count + 1, sizeof *cfg->env);
  cfg->cgroup_procs = xcalloc(count + 1, sizeof *cfg->cgroup_procs);
  int pending_perms = 0, pending_size = 0;
  mode_t perms = 0;
  unsigned long long size = 0;
#define NEED(k)                                                                             \
  do {                                                                                      \
    if (i + (k) >= count) die("option %s needs %d argument%s", opt, (k), (k) == 1 ? "" : "s"); \
  } while (0)
  for (size_t i = 0; i < count; i++) {
    const char *opt = words[i];
    struct op *op = &cfg->ops[cfg->n_ops];
    if (strcmp(opt, "--die-with-parent") == 0) cfg->die_with_parent = 1;
    else if (strcmp(opt, "--new-session") == 0) cfg->new_session = 1;
    else if (strcmp(opt, "--unshare-pid") == 0) cfg->unshare_pid = 1;
    else if (strcmp(opt, "--unshare-ipc") == 0) cfg->unshare_ipc = 1;
    else if (strcmp(opt, "--unshare-uts") == 0) cfg->unshare_uts = 1;
    else if (strcmp(opt, "--unshare-net") == 0) cfg->unshare_net = 1;
    else if (strcmp(opt, "--unshare-cgroup-try") == 0) cfg->unshare_cgroup_try = 1;
    else if (strcmp(opt, "--hostname") == 0) { NEED(1); cfg->hostname = words[++i]; }
    else if (strcmp(opt, "--json-status-fd") == 0) { NEED(1); cfg->status_fd = parse_fd(words[++i], opt); }
    else if (strcmp(opt, "--chdir") == 0) { NEED(1); cfg->chdir_path = words[++i]; }
    else if (strcmp(opt, "--uid") == 0) { NEED(1); cfg->uid = parse_id(words[++i], "--uid"); }
    else if (strcmp(opt, "--gid") == 0) { NEED(1); cfg->gid = parse_id(words[++i], "--gid"); }
    else if (strcmp(opt, "--cgroup-procs") == 0) {
      NEED(1);
      const char *file = words[++i];
      if (!is_absolute_clean(file)) die("--cgroup-procs needs an absolute, clean path, not \"%s\"", file);
      cfg->cgroup_procs[cfg->n_cgroup_procs++] = words[i];
    }
    else if (strcmp(opt, "--seccomp-bpf") == 0) {
      NEED(1);
      parse_seccomp(cfg, words[++i]);
    } else if (strcmp(opt, "--setenv") == 0) {
      NEED(2);
      const char *name = words[++i], *value = words[++i];
      if (name[0] == '\0' || strchr(name, '=') != NULL) die("--setenv: invalid name \"%s\"", name);
      size_t l = strlen(name) + strlen(value) + 2;
      char *kv = malloc(l);
      if (kv == NULL) die("out of memory");
      snprintf(kv, l, "%s=%s", name, value);
      cfg->env[cfg->n_env++] = kv;
    } else if (strcmp(opt, "--perms") == 0) {
      NEED(1);
      char *end;
      errno = 0;
      unsigned long v = strtoul(words[++i], &end, 8);
      if (errno != 0 || *end != '\0' || v > 07777) die("--perms: not an octal mode: \"%s\"", words[i]);
      pending_perms = 1;
      perms = (mode_t)v;
      continue;
    } else if (strcmp(opt, "--size") == 0) {
      NEED(1);
      char *end;
      errno = 0;
      unsigned long long v = strtoull(words[++i], &end, 10);
      if (errno != 0 || *end != '\0' || v == 0 || words[i][0] == '-') die("--size: not a byte count: \"%s\"", words[i]);
      pending_size = 1;
      size = v;
      continue;
    } else {
      if (strcmp(opt, "--ro-bind") == 0) op->kind = OP_RO_BIND;
      else if (strcmp(opt, "--bind") == 0) op->kind = OP_BIND;
      else if (strcmp(opt, "--dev-bind") == 0) op->kind = OP_DEV_BIND;
      else if (strcmp(opt, "--symlink") == 0) op->kind = OP_SYMLINK;
      else if (strcmp(opt, "--tmpfs") == 0) op->kind = OP_TMPFS;
      else if (strcmp(opt, "--proc") == 0) op->kind = OP_PROC;
      else if (strcmp(opt, "--dev") == 0) op->kind = OP_DEV;
      else if (strcmp(opt, "--dir") == 0) op->kind = OP_DIR;
      else die("unknown option \"%s\"", opt);
      op->tree = -1;
      if (op->kind <= OP_DEV_BIND || op->kind == OP_SYMLINK) {
        NEED(2);
        op->src = words[++i];
        op->dest = words[++i];
        if (op->kind != OP_SYMLINK && !is_absolute_clean(op->src)) die("%s: source \"%s\" is not an absolute path without . or ..", opt, op->src);
      } else {
        NEED(1);
        op->dest = words[++i];
      }
      if (!is_absolute_clean(op->dest)) die("%s: destination \"%s\" is not an absolute path without . or ..", opt, op->dest);
      if (pending_perms && op->kind != OP_TMPFS && op->kind != OP_DIR) die("--perms applies to --tmpfs or --dir, not %s", opt);
      if (pending_size && op->kind != OP_TMPFS) die("--size applies to --tmpfs, not %s", opt);
      op->has_perms = pending_perms;
      op->perms = perms;
      op->has_size = pending_size;
      op->size = size;
      pending_perms = pending_size = 0;
      cfg->n_ops++;
      continue;
    }
    if (pending_perms || pending_size) die("--perms or --size before %s", opt);
  }
  if (pending_perms || pending_size) die("--perms or --size at the end of the options");
  if (!cfg->unshare_pid) die("--unshare-pid is required (the task's init ends the whole sandbox)");
  if (cfg->uid <= 0 || cfg->gid <= 0) die("--uid and --gid are required (the task never runs as root)");
  free(words);
}

/* ---- mounts ---- */

static int clone_tree(const char *path) {
  return (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
}

static void set_attrs(int tree, const char *what, uint64_t set) {
  struct mount_attr_v0 attr = {.attr_set = set, .attr_clr = 0, .propagation = MS_PRIVATE, .userns_fd = 0};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
    die_errno("making %s %s", what, (set & MOUNT_ATTR_RDONLY) ? "read-only" : "nosuid");
}

/* Clones every bind source while the host's tree is still visible (see the file comment). */
static void clone_sources(struct config *cfg) {
  int need_dev = 0;
  for (size_t i = 0; i < cfg->n_ops; i++) {
    struct op *op = &cfg->ops[i];
    if (op->kind == OP_DEV) need_dev = 1;
    if (op->kind > OP_DEV_BIND) continue;
    op->tree = clone_tree(op->src);
    if (op->tree < 0) die_errno("cannot bind %s", op->src);
    uint64_t set = MOUNT_ATTR_NOSUID | (op->kind == OP_DEV_BIND ? 0 : MOUNT_ATTR_NODEV) |
                   (op->kind == OP_RO_BIND ? MOUNT_ATTR_RDONLY : 0);
    set_attrs(op->tree, op->src, set);
  }
  for (size_t i = 0; i < N_DEV_NODES; i++) {
    cfg->dev_trees[i] = -1;
    if (!need_dev) continue;
    char path[64];
    snprintf(path, sizeof path, "/dev/%s", DEV_NODES[i]);
    cfg->dev_trees[i] = clone_tree(path);
    if (cfg->dev_trees[i] < 0) {
      if (errno == ENOENT || errno == ENXIO) continue;
      die_errno("cannot bind %s", path);
    }
    set_attrs(cfg->dev_trees[i], path, MOUNT_ATTR_NOSUID);
  }
}

/* mkdir -p of every component of `path` but the last when `parents_only`; 0755 for what it makes. */
static void make_dirs(const char *path, int parents_only, mode_t last_mode) {
  char buf[PATH_MAX];
  if (strlen(path) >= sizeof buf) die("path too long: %s", path);
  strcpy(buf, path);
  char *end = buf + strlen(buf);
  while (end > buf + 1 && end[-1] == '/') *--end = '\0';
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    int last = *p == '\0';
    if (last && parents_only) return;
    char saved = *p;
    *p = '\0';
    if (mkdir(buf, last ? last_mode : 0755) != 0) {
      struct stat st;
      if (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) die_errno("cannot make directory %s", buf);
    }
    *p = saved;
    if (last) return;
  }
}

static void make_file(const char *path) {
  make_dirs(path, 1, 0755);
  int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
  if (fd < 0) {
    struct stat st;
    /* An existing mount point (a file in a read-only tree: a hidden file, a pinned program, through the
       tree's own links, which resolve inside the new root) will do, as for bwrap. */
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) return;
    die_errno("cannot make mount point %s", path);
  }
  close(fd);
}

static void attach(int tree, const char *dest) {
  struct stat st;
  if (fstat(tree, &st) != 0) die_errno("stat of the source for %s", dest);
  if (S_ISDIR(st.st_mode)) make_dirs(dest, 0, 0755);
  else make_file(dest);
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, dest, MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_SYMLINKS) != 0)
    die_errno("cannot mount at %s", dest);
  close(tree);
}

static void mount_tmpfs(const char *dest, mode_t mode, int has_size, unsigned long long size) {
  char data[96];
  if (has_size) snprintf(data, sizeof data, "mode=%04o,size=%llu", (unsigned)mode, size);
  else snprintf(data, sizeof data, "mode=%04o", (unsigned)mode);
  if (mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_NODEV, data) != 0) die_errno("cannot mount a tmpfs at %s", dest);
}

static void join_path(char *out, size_t cap, const char *dir, const char *name) {
  if ((size_t)snprintf(out, cap, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, name) >= cap) die("path too long: %s/%s", dir, name);
}

static void read_only_bind(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  int tree = clone_tree(path);
  if (tree < 0) die_errno("cannot bind %s", path);
  set_attrs(tree, path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0) die_errno("cannot mount at %s", path);
  close(tree);
}

static void mount_proc(const char *dest) {
  make_dirs(dest, 0, 0755);
  if (mount("proc", dest, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) die_errno("cannot mount proc at %s", dest);
  /* As bwrap: what could change the host through this namespace's /proc is read-only. */
  static const char *const covered[] = {"sys", "sysrq-trigger", "irq", "bus"};
  for (size_t i = 0; i < sizeof covered / sizeof covered[0]; i++) {
    char path[PATH_MAX];
    join_path(path, sizeof path, dest, covered[i]);
    read_only_bind(path);
  }
}

static void mount_dev(const struct config *cfg, const char *dest) {
  make_dirs(dest, 0, 0755);
  mount_tmpfs(dest, 0755, 0, 0);
  char path[PATH_MAX];
  for (size_t i = 0; i < N_DEV_NODES; i++) {
    if (cfg->dev_trees[i] < 0) continue;
    join_path(path, sizeof path, dest, DEV_NODES[i]);
    attach(cfg->dev_trees[i], path);
  }
  join_path(path, sizeof path, dest, "shm");
  make_dirs(path, 0, 0755);
  join_path(path, sizeof path, dest, "pts");
  make_dirs(path, 0, 0755);
  if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620") != 0)
    die_errno("cannot mount devpts at %s", path);
  static const char *const links[][2] = {{"pts/ptmx", "ptmx"},          {"/proc/self/fd", "fd"},
                                         {"/proc/self/fd/0", "stdin"},  {"/proc/self/fd/1", "stdout"},
                                         {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    join_path(path, sizeof path, dest, links[i][1]);
    if (symlink(links[i][0], path) != 0) die_errno("cannot make %s", path);
  }
}

static void make_symlink(const char *target, const char *dest) {
  make_dirs(dest, 1, 0755);
  if (symlink(target, dest) == 0) return;
  char existing[PATH_MAX];
  ssize_t n = errno == EEXIST ? readlink(dest, existing, sizeof existing - 1) : -1;
  if (n >= 0) {
    existing[n] = '\0';
    if (strcmp(existing, target) == 0) return;
  }
  die_errno("cannot make the symlink %s", dest);
}

/* In the new mount namespace: an empty root, the host's tree detached, then the options in order. */
static void build_root(const struct config *cfg) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die_errno("making the mounts private");
  /* /tmp is only a place to stand: pivot_root makes the tmpfs the root and the host's tree is let go. */
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) die_errno("cannot mount the new root");
  if (chdir("/tmp") != 0) die_errno("chdir to the new root");
  if (syscall(SYS_pivot_root, ".", ".") != 0) die_errno("pivot_root");
  if (umount2(".", MNT_DETACH) != 0) die_errno("detaching the host's tree");
  if (chdir("/") != 0) die_errno("chdir /");
  for (size_t i = 0; i < cfg->n_ops; i++) {
    const struct op *op = &cfg->ops[i];
    switch (op->kind) {
      case OP_RO_BIND:
      case OP_BIND:
      case OP_DEV_BIND: attach(op->tree, op->dest); break;
      case OP_TMPFS:
        make_dirs(op->dest, 0, 0755);
        mount_tmpfs(op->dest, op->has_perms ? op->perms : 0755, op->has_size, op->size);
        break;
      case OP_PROC: mount_proc(op->dest); break;
      case OP_DEV: mount_dev(cfg, op->dest); break;
      case OP_DIR: {
        make_dirs(op->dest, 0, op->has_perms ? op->perms : 0755);
        break;
      }
      case OP_SYMLINK: make_symlink(op->src, op->dest); break;
    }
  }
  /* The root tmpfs holds only mount points: read-only, so nothing can be made beside them. */
  struct mount_attr_v0 attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &attr, sizeof attr) != 0) die_errno("making the root read-only");
}

static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die_errno("socket for lo");
  struct ifreq r;
  memset(&r, 0, sizeof r);
  strcpy(r.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &r) != 0) die_errno("reading lo");
  r.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &r) != 0) die_errno("bringing lo up");
  close(s);
}

/* ---- the task ---- */

static void drop_privileges(const struct config *cfg) {
  /* The bounding set first (needs CAP_SETPCAP, still held), then ambient, then the ids. */
  for (int cap = 0; cap <= 63; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die_errno("dropping capability %d", cap);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) die_errno("clearing ambient capabilities");
  if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) die_errno("PR_SET_KEEPCAPS");
  if (setgroups(0, NULL) != 0) die_errno("setgroups");
  if (setresgid((gid_t)cfg->gid, (gid_t)cfg->gid, (gid_t)cfg->gid) != 0) die_errno("setresgid");
  if (setresuid((uid_t)cfg->uid, (uid_t)cfg->uid, (uid_t)cfg->uid) != 0) die_errno("setresuid");
  /* Leaving uid 0 clears the permitted and effective sets; the inheritable one is cleared here. */
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &hdr, data) != 0) die_errno("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die_errno("no_new_privs");
  uid_t r, e, s;
  gid_t rg, eg, sg;
  if (getresuid(&r, &e, &s) != 0 || getresgid(&rg, &eg, &sg) != 0 || r != (uid_t)cfg->uid || e != r || s != r ||
      rg != (gid_t)cfg->gid || eg != rg || sg != rg || getgroups(0, NULL) != 0)
    die("the uid drop did not take");
  if (memset(data, 0xff, sizeof data), syscall(SYS_capget, &hdr, data) != 0 || data[0].effective != 0 ||
      data[0].permitted != 0 || data[0].inheritable != 0 || data[1].effective != 0 || data[1].permitted != 0 ||
      data[1].inheritable != 0)
    die("capabilities left after the uid drop");
}

static const char *env_value(char *const *env, const char *name) {
  size_t l = strlen(name);
  for (; *env != NULL; env++)
    if (strncmp(*env, name, l) == 0 && (*env)[l] == '=') return *env + l + 1;
  return NULL;
}

static void exec_on_path(const struct config *cfg, const char *path, int *err);

/* A file without `#!` that the kernel will not run: through /bin/sh, as execvp (and so `env`) does.
   Returns only when that failed too, with errno ENOEXEC kept for the message. */
static void exec_script(const struct config *cfg, const char *file) {
  size_t n = 0;
  while (cfg->argv[n] != NULL) n++;
  char **argv = calloc(n + 2, sizeof *argv);
  if (argv != NULL) {
    argv[0] = (char *)"/bin/sh";
    argv[1] = (char *)file;
    for (size_t i = 1; i < n; i++) argv[i + 1] = cfg->argv[i];
    execve("/bin/sh", argv, cfg->env);
    free(argv);
  }
  errno = ENOEXEC;
}

/* Every signal back to its default disposition and none blocked: the task starts as from a clean exec
   (an ignored SIGTERM or SIGCHLD in whoever started the worker must not reach it). */
static void default_signals(void) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The init, once the task runs: still uid 0 but with no capability in any set, and no_new_privs. */
static void drop_all_capabilities(void) {
  for (int cap = 0; cap <= 63; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) _exit(1);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) _exit(1);
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &hdr, data) != 0) _exit(1);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(1);
}

/* execvp with the task's PATH (as `env -i NAME=VALUE… COMMAND` did): 127 not found, 126 not runnable. */
static void exec_task(const struct config *cfg) {
  const char *cmd = cfg->argv[0];
  int err = ENOENT;
  if (strchr(cmd, '/') != NULL) {
    execve(cmd, cfg->argv, cfg->env);
    err = errno;
    if (err == ENOEXEC) exec_script(cfg, cmd);
  } else {
    const char *path = env_value(cfg->env, "PATH");
    exec_on_path(cfg, path == NULL ? "/bin:/usr/bin" : path, &err);
  }
  char msg[PATH_MAX + 128];
  int n = snprintf(msg, sizeof msg, "gpu-broker-sandbox: cannot run %s: %s\n", cmd, strerror(err));
  ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
  (void)w;
  _exit(err == ENOENT ? 127 : 126);
}

static void exec_on_path(const struct config *cfg, const char *path, int *err) {
  const char *cmd = cfg->argv[0];
  for (const char *p = path;;) {
    const char *e = strchrnul(p, ':');
    char full[PATH_MAX];
    size_t dl = (size_t)(e - p);
    if (dl + strlen(cmd) + 2 < sizeof full) {
      if (dl == 0) snprintf(full, sizeof full, "%s", cmd);
      else snprintf(full, sizeof full, "%.*s/%s", (int)dl, p, cmd);
      execve(full, cfg->argv, cfg->env);
      if (errno == ENOEXEC) exec_script(cfg, full);
      if (errno != ENOENT && errno != ENOTDIR) *err = errno;
    }
    if (*e == '\0') return;
    p = e + 1;
  }
}

static int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

/* PID 1 of the sandbox: builds the root, starts the task, reaps until the task's first process is gone. */
static void sandbox_init(const struct config *cfg, int go_fd) __attribute__((noreturn));
static void sandbox_init(const struct config *cfg, int go_fd) {
  if (cfg->status_fd >= 0) close(cfg->status_fd);
  if (cfg->die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) die_errno("PR_SET_PDEATHSIG");
  char go = 0;
  ssize_t r;
  do r = read(go_fd, &go, 1);
  while (r < 0 && errno == EINTR);
  if (r != 1 || go != 'g') _exit(1); /* the parent is gone before it could report us */
  /* The launcher keeps its end open while it lives: end-of-file now means it died before this process
     armed its death signal (above), which would then never come. */
  int fl = fcntl(go_fd, F_GETFL);
  if (fl < 0 || fcntl(go_fd, F_SETFL, fl | O_NONBLOCK) != 0) _exit(1);
  r = read(go_fd, &go, 1);
  if (!(r < 0 && errno == EAGAIN)) _exit(1);
  close(go_fd);
  build_root(cfg);
  if (cfg->hostname != NULL && sethostname(cfg->hostname, strlen(cfg->hostname)) != 0) die_errno("sethostname");
  if (cfg->unshare_net) loopback_up();
  if (chdir(cfg->chdir_path != NULL ? cfg->chdir_path : "/") != 0) die_errno("chdir %s", cfg->chdir_path);
  pid_t task = fork();
  if (task < 0) die_errno("fork");
  if (task == 0) {
    if (cfg->new_session && setsid() < 0) die_errno("setsid");
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 1024; fd++) close(fd);
    }
    default_signals();
    umask(cfg->umask);
    /* A session keyring of its own: the one it inherited is the worker's (and every earlier task's),
       whose keys it could read and where it could leave keys for the next task. Joined before the uid
       drop, so the new keyring is charged to root and goes with the task's last process: joined as the
       task's uid it made that uid three keys (its session, user and user-session keyrings) that the
       kernel keeps for good, about 1 KiB per task never freed (docs/security.md "The task sandbox"). The task possesses it
       all the same; the filter denies it every key call. */
    if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS)
      die_errno("a session keyring of its own");
    drop_privileges(cfg);
    install_seccomp(cfg);
    exec_task(cfg);
  }
  if (syscall(SYS_close_range, 3, ~0U, 0) != 0) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
  }
  /* From here the init only reaps: it keeps no capability, nor the worker's keyring. */
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS) _exit(1);
  drop_all_capabilities();
  for (;;) {
    int st;
    pid_t p = wait(&st);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) _exit(1);
    if (p == task) _exit(status_code(st));
  }
}

static unsigned long long ns_inode(pid_t pid, const char *name) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, name);
  return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static void write_all(int fd, const char *s) {
  size_t len = strlen(s);
  while (len > 0) {
    ssize_t w = write(fd, s, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    len -= (size_t)w;
  }
}

/* Moves this process (and so all it will start) into each of the task's cgroups; fails closed. */
static void join_cgroups(const struct config *cfg) {
  for (size_t i = 0; i < cfg->n_cgroup_procs; i++) {
    const char *file = cfg->cgroup_procs[i];
    int fd = open(file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) die_errno("--cgroup-procs %s", file);
    /* "0": the writer itself (v1 and v2 alike). */
    if (write(fd, "0", 1) != 1) die_errno("--cgroup-procs %s: cannot move into the cgroup", file);
    close(fd);
  }
}

int main(int argc, char **argv) {
  struct config cfg = {.status_fd = -1};
  /* An inherited "ignore SIGCHLD" would make the kernel reap our children before we could wait. */
  signal(SIGCHLD, SIG_DFL);
  pid_t parent = getppid();
  if (argc < 5 || strcmp(argv[1], "--args") != 0 || strcmp(argv[3], "--") != 0)
    die("usage: gpu-broker-sandbox --args FD -- COMMAND [ARG...]");
  int args_fd = parse_fd(argv[2], "--args");
  size_t len;
  char *data = read_all(args_fd, &len);
  close(args_fd);
  parse_options(&cfg, data, len);
  cfg.argv = argv + 4;
  if (geteuid() != 0) die("must run as root (a worker without root uses bwrap in a user namespace)");
  join_cgroups(&cfg);
  cfg.umask = umask(0);
  if (cfg.status_fd >= 0 && fcntl(cfg.status_fd, F_GETFD) < 0) die_errno("--json-status-fd %d", cfg.status_fd);
  if (cfg.die_with_parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) die_errno("PR_SET_PDEATHSIG");
    /* Armed only now: a parent that died while the options were read would never send it. */
    if (getppid() != parent) die("the parent exited before the sandbox started");
  }
  clone_sources(&cfg);
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) die_errno("pipe");
  unsigned long flags = SIGCHLD | CLONE_NEWPID | CLONE_NEWNS | (cfg.unshare_ipc ? CLONE_NEWIPC : 0) |
                        (cfg.unshare_uts ? CLONE_NEWUTS : 0) | (cfg.unshare_net ? CLONE_NEWNET : 0);
  fflush(NULL);
  long pid = syscall(SYS_clone, flags | (cfg.unshare_cgroup_try ? CLONE_NEWCGROUP : 0), 0, 0, 0, 0);
  if (pid < 0 && cfg.unshare_cgroup_try && errno == EINVAL) pid = syscall(SYS_clone, flags, 0, 0, 0, 0);
  if (pid < 0) die_errno("clone");
  if (pid == 0) {
    close(go[1]);
    sandbox_init(&cfg, go[0]);
  }
  close(go[0]);
  for (size_t i = 0; i < cfg.n_ops; i++)
    if (cfg.ops[i].tree >= 0) close(cfg.ops[i].tree);
  for (size_t i = 0; i < N_DEV_NODES; i++)
    if (cfg.dev_trees[i] >= 0) close(cfg.dev_trees[i]);
  if (cfg.status_fd >= 0) {
    char line[512];
    snprintf(line, sizeof line,
             "{ \"child-pid\": %ld, \"cgroup-namespace\": %llu, \"ipc-namespace\": %llu, \"mnt-namespace\": %llu, "
             "\"net-namespace\": %llu, \"pid-namespace\": %llu, \"uts-namespace\": %llu }\n",
             pid, ns_inode((pid_t)pid, "cgroup"), ns_inode((pid_t)pid, "ipc"), ns_inode((pid_t)pid, "mnt"),
             ns_inode((pid_t)pid, "net"), ns_inode((pid_t)pid, "pid"), ns_inode((pid_t)pid, "uts"));
    write_all(cfg.status_fd, line);
  }
  ssize_t w = write(go[1], "g", 1);
  (void)w;
  /* go[1] stays open until this process exits: the init reads end-of-file on it if we are gone. */
  int st;
  while (waitpid((pid_t)pid, &st, 0) < 0)
    if (errno != EINTR) die_errno("waitpid");
  int code = status_code(st);
  if (cfg.status_fd >= 0) {
    char line[64];
    snprintf(line, sizeof line, "{ \"exit-code\": %d }\n", code);
    write_all(cfg.status_fd, line);
  }
  return code;
}
