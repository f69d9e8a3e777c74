/*
 * gpu-broker-spawner: the native spawner (ADR 0040), a drop-in for the Node spawner of ADR 0032
 * (worker/local/spawner.ts). The worker starts it as its child with stdin a pipe and fd 3 Node's IPC
 * channel; it starts the task boxes with vfork + exec, hands their pipes to the worker, writes fd 4 once,
 * reaps them and reports how they ended. One process per worker, for the worker's whole life.
 *
 * worker -> spawner, on stdin: frames of  u32 length (little-endian, of what follows)  u8 kind  ...
 *   'S' spawn   u32 id, u8 flags (1: uid and gid follow, 2: argv0 follows, 4: a file follows),
 *               [u32 uid, u32 gid], u8 n, n x u8 stdio (0 ignore, 1 pipe; fd 0 is always ignored),
 *               str command, [str argv0], [u8 fd, str path: that file opened read-only at fd 5-7 of the
 *               process (bwrap's --seccomp 5)], str cwd, u32 argc, argc x str, u32 envc, envc x str ("NAME=value");
 *               str = u32 length + bytes (no NUL inside)
 *   'I' input   u32 id, then the bytes to write into its fd 4, which is then closed
 * spawner -> worker, on fd 3, one JSON line each, as Node's IPC channel carries them:
 *   {"t":"spawned","id":N,"pid":P}
 *   {"cmd":"NODE_HANDLE","type":"net.Socket","msg":{"t":"fd","id":N,"fd":F}}  with the pipe's read end
 *       attached (SCM_RIGHTS): Node's own form for a handle, so the worker's child_process receives a
 *       net.Socket, acknowledges it, and delivers {"t":"fd",...} with it, as it did from the Node spawner
 *   {"t":"error","id":N,"message":"spawn COMMAND ENOENT"}
 *   {"t":"exit","id":N,"code":C,"signal":null} or {"t":"exit","id":N,"code":null,"signal":"SIGKILL"}
 * What the worker sends on fd 3 (Node's acknowledgements of the handles) is read and dropped.
 *
 * Each started process is what Node's spawn(..., {detached: true}) made: the leader of a new session and
 * process group, stdin /dev/null, the asked pipes on fds 1-4, no other descriptor of ours (all of ours are
 * close-on-exec), default signal dispositions and an empty signal mask, in `cwd`, with exactly `env`,
 * after setgroups([]) + setgid + setuid when asked. A command without a slash is searched in the PATH of
 * `env` (as libuv does). If anything before the exec fails, the process exits 127 unreported and the
 * worker gets {"t":"error"} with the errno's name.
 *
 * When the worker goes (its channel or stdin closes), the spawner exits: a sandbox dies with it
 * (--die-with-parent), as it did with the Node spawner. A frame it cannot parse ends it too (exit 2): the
 * worker then fails what was in flight as it does for any death of the spawner.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define CHANNEL_FD 3
#define MAX_STDIO 5
/* Descriptors 0..MAX_FDS-1 of a started process may be set: stdio, status, options, and one file at 5-7. */
#define MAX_FDS 8
/* A frame larger than this is not one the worker sends (argv + env of a task are far smaller). */
#define MAX_FRAME (64u * 1024u * 1024u)
/* Descriptors of ours start here, above every fd a task gets (0-4). */
#define HIGH_FD 16

struct kid {
  uint32_t id;
  pid_t pid;
  int in_fd; /* fd 4's write end, until written and closed; -1 when none */
  char *in_buf;
  size_t in_len, in_off;
  int in_asked; /* the worker sent the bytes (they may not all be written yet) */
};

static struct kid *kids;
static size_t nkids, capkids;
static int devnull = -1;

static void die(const char *what) {
  fprintf(stderr, "gpu-broker-spawner: %s: %s\n", what, strerror(errno));
  exit(2);
}

static int high(int fd) {
  if (fd < 0) return fd;
  int h = fcntl(fd, F_DUPFD_CLOEXEC, HIGH_FD);
  int saved = errno;
  close(fd);
  errno = saved;
  return h;
}

/* ---- output: JSON lines on the channel ---------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      exit(0); /* the worker is gone */
    }
    p += w;
    n -= (size_t)w;
  }
}

static void send_line(const char *line) { write_all(CHANNEL_FD, line, strlen(line)); }

/* The line and the descriptor in one sendmsg: the receiver gets the descriptor with this line. */
static void send_fd_line(const char *line, int fd) {
  struct iovec iov = {.iov_base = (void *)line, .iov_len = strlen(line)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    ssize_t w = sendmsg(CHANNEL_FD, &msg, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) exit(0);
    /* The descriptor went with the first byte; the rest of a short write goes plainly. */
    if ((size_t)w < iov.iov_len) write_all(CHANNEL_FD, line + w, iov.iov_len - (size_t)w);
    return;
  }
}

/* Appends `s` as a JSON string (quoted, escaped) to `out` of size `cap`. */
static void json_string(char *out, size_t cap, const char *s) {
  size_t n = strlen(out);
  if (n + 2 >= cap) return;
  out[n++] = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p != 0 && n + 8 < cap; p++) {
    if (*p == '"' || *p == '\\') {
      out[n++] = '\\';
      out[n++] = (char)*p;
    } else if (*p < 0x20 || *p == 0x7f) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *p);
    } else {
      out[n++] = (char)*p; /* UTF-8 passes through; a broken sequence is Node's to replace */
    }
  }
  out[n++] = '"';
  out[n] = 0;
}

/* A number and the name Node gives it (an errno's code, a signal's name). */
struct named {
  int no;
  const char *name;
};

static const char *name_of(const struct named *table, size_t n, int no) {
  for (size_t i = 0; i < n; i++)
    if (table[i].no == no) return table[i].name;
  return NULL;
}

static const struct named ERRNOS[] = {
    {ENOENT, "ENOENT"}, {EACCES, "EACCES"}, {EPERM, "EPERM"}, {ENOEXEC, "ENOEXEC"}, {ENOTDIR, "ENOTDIR"},
    {E2BIG, "E2BIG"}, {ENOMEM, "ENOMEM"}, {EAGAIN, "EAGAIN"}, {ELOOP, "ELOOP"}, {ENAMETOOLONG, "ENAMETOOLONG"},
    {ETXTBSY, "ETXTBSY"}, {EINVAL, "EINVAL"}, {EMFILE, "EMFILE"}, {ENFILE, "ENFILE"}, {EISDIR, "EISDIR"},
    {EIO, "EIO"},
};

static void send_error(uint32_t id, const char *command, int err) {
  const char *name = name_of(ERRNOS, sizeof ERRNOS / sizeof ERRNOS[0], err);
  char text[600];
  snprintf(text, sizeof text, "spawn %.400s %s (%s)", command, name != NULL ? name : "E?", strerror(err));
  char line[1400];
  snprintf(line, sizeof line, "{\"t\":\"error\",\"id\":%u,\"message\":", id);
  json_string(line, sizeof line - 3, text);
  strcat(line, "}\n");
  send_line(line);
}

static const struct named SIGNALS[] = {
    {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"}, {SIGTRAP, "SIGTRAP"},
    {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}, {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
    {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
    {SIGSTKFLT, "SIGSTKFLT"}, {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},
    {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"}, {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"}, {SIGPWR, "SIGPWR"}, {SIGSYS, "SIGSYS"},
};

static void send_exit(uint32_t id, int status) {
  char line[160];
  if (WIFSIGNALED(status)) {
    const char *name = name_of(SIGNALS, sizeof SIGNALS / sizeof SIGNALS[0], WTERMSIG(status));
    /* A real-time signal has no name Node knows: it reads as an exit with 128 + the signal. */
    if (name != NULL)
      snprintf(line, sizeof line, "{\"t\":\"exit\",\"id\":%u,\"code\":null,\"signal\":\"%s\"}\n", id, name);
    else
      snprintf(line, sizeof line, "{\"t\":\"exit\",\"id\":%u,\"code\":%d,\"signal\":null}\n", id,
               128 + WTERMSIG(status));
  } else {
    snprintf(line, sizeof line, "{\"t\":\"exit\",\"id\":%u,\"code\":%d,\"signal\":null}\n", id,
             WEXITSTATUS(status));
  }
  send_line(line);
}

/* ---- input: frames on stdin --------------------------------------------------------------------- */

struct reader {
  const unsigned char *p, *end;
  int bad;
};

static uint32_t u32(struct reader *r) {
  if (r->end - r->p < 4) {
    r->bad = 1;
    return 0;
  }
  uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
  r->p += 4;
  return v;
}

static uint8_t u8(struct reader *r) {
  if (r->end - r->p < 1) {
    r->bad = 1;
    return 0;
  }
  return *r->p++;
}

/* A string, copied and NUL-terminated; NULL (and bad) when it runs past the frame or holds a NUL. */
static char *str(struct reader *r) {
  uint32_t n = u32(r);
  if (r->bad || (size_t)(r->end - r->p) < n || memchr(r->p, 0, n) != NULL) {
    r->bad = 1;
    return NULL;
  }
  char *s = malloc((size_t)n + 1);
  if (s == NULL) die("malloc");
  memcpy(s, r->p, n);
  s[n] = 0;
  r->p += n;
  return s;
}

static char **strs(struct reader *r, uint32_t *count) {
  uint32_t n = u32(r);
  if (r->bad || n > (uint32_t)(r->end - r->p) / 4) {
    r->bad = 1;
    return NULL;
  }
  char **v = calloc((size_t)n + 1, sizeof *v);
  if (v == NULL) die("calloc");
  for (uint32_t i = 0; i < n && !r->bad; i++) v[i] = str(r);
  *count = n;
  return v;
}

static void free_strs(char **v) {
  if (v == NULL) return;
  for (char **p = v; *p != NULL; p++) free(*p);
  free(v);
}

/* ---- the child, between vfork and exec ------------------------------------------------------------ */

struct start {
  const char *command, *cwd;
  char **argv, **envp;
  int has_ids; /* uid and gid below are set */
  uid_t uid;
  gid_t gid;
  int fds[MAX_FDS]; /* what becomes each fd; -1: closed */
  int nfds;
  volatile int err; /* set by the child when it fails before the exec (vfork shares our memory) */
};

/* The PATH in `envp`, or libuv's default. */
static const char *path_of(char **envp) {
  for (char **e = envp; *e != NULL; e++)
    if (strncmp(*e, "PATH=", 5) == 0) return *e + 5;
  return "/usr/bin:/bin";
}

static void exec_searching(struct start *s) {
  if (strchr(s->command, '/') != NULL) {
    execve(s->command, s->argv, s->envp);
    return;
  }
  /* As execvpe, with the task's PATH: no allocation (we share the parent's memory). */
  const char *path = path_of(s->envp);
  char buf[4096];
  int saw_eacces = 0;
  size_t clen = strlen(s->command);
  for (const char *p = path;; p++) {
    const char *colon = strchr(p, ':');
    size_t dlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
    if (dlen + 1 + clen + 1 <= sizeof buf) {
      size_t n = 0;
      if (dlen == 0) buf[n++] = '.';
      memcpy(buf + n, p, dlen);
      n += dlen;
      buf[n++] = '/';
      memcpy(buf + n, s->command, clen + 1);
      execve(buf, s->argv, s->envp);
      if (errno == EACCES) saw_eacces = 1;
      else if (errno != ENOENT && errno != ENOTDIR) return;
    }
    if (colon == NULL) break;
    p = colon;
  }
  errno = saw_eacces ? EACCES : ENOENT;
}

__attribute__((noinline)) static void child(struct start *s) {
  sigset_t none;
  sigemptyset(&none);
  for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL); /* SIGPIPE was ignored here */
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (setsid() < 0) goto fail;
  for (int i = 0; i < s->nfds; i++) {
    if (s->fds[i] < 0) continue;
    if (dup2(s->fds[i], i) < 0) goto fail; /* the copy is not close-on-exec */
  }
  if (s->has_ids) {
    if (setgroups(0, NULL) < 0 && errno != EPERM) goto fail;
    if (setgid(s->gid) < 0) goto fail;
    if (setuid(s->uid) < 0) goto fail;
  }
  if (chdir(s->cwd) < 0) goto fail;
  exec_searching(s);
fail:
  s->err = errno != 0 ? errno : EINVAL;
  _exit(127);
}

/*
 * vfork + exec: the parent waits only until the child has exec'd (or failed), and no page table is
 * copied. Its own function, so that no local of the caller lives across the vfork. -1 with s->err set
 * when the process could not be started (a child that failed before its exec is reaped here).
 */
__attribute__((noinline)) static pid_t start_process(struct start *s) {
  s->err = 0;
  pid_t pid = vfork();
  if (pid == 0) child(s);
  if (pid < 0) {
    s->err = errno;
    return -1;
  }
  if (s->err != 0) {
    waitpid(pid, NULL, 0);
    return -1;
  }
  return pid;
}

/* ---- the parent ----------------------------------------------------------------------------------- */

static struct kid *kid_of(uint32_t id) {
  for (size_t i = 0; i < nkids; i++)
    if (kids[i].id == id) return &kids[i];
  return NULL;
}

static void close_input(struct kid *k) {
  if (k->in_fd >= 0) close(k->in_fd);
  k->in_fd = -1;
  free(k->in_buf);
  k->in_buf = NULL;
  k->in_len = k->in_off = 0;
}

static void forget(size_t i) {
  close_input(&kids[i]);
  kids[i] = kids[--nkids];
}

static void spawn_frame(struct reader *r) {
  uint32_t id = u32(r);
  uint8_t flags = u8(r);
  /* Unsigned, as the kernel's: a uid from 2^31 up is an ordinary one (task uids reach 4294967294). */
  uint32_t uid = 0, gid = 0;
  int has_ids = (flags & 1) != 0;
  if (has_ids) {
    uid = u32(r);
    gid = u32(r);
  }
  uint8_t n = u8(r);
  uint8_t stdio[MAX_STDIO] = {0};
  if (n > MAX_STDIO) r->bad = 1;
  for (uint8_t i = 0; i < n && !r->bad; i++) stdio[i] = u8(r);
  char *command = str(r);
  char *argv0 = (flags & 2) ? str(r) : NULL;
  int file_fd = -1;
  char *file_path = NULL;
  if (flags & 4) {
    file_fd = u8(r);
    file_path = str(r);
  }
  char *cwd = str(r);
  uint32_t argc = 0, envc = 0;
  char **args = strs(r, &argc);
  char **env = strs(r, &envc);
  if (r->bad || r->p != r->end || (flags & ~7u) != 0 || ((flags & 4) && (file_fd < MAX_STDIO || file_fd >= MAX_FDS))) {
    fprintf(stderr, "gpu-broker-spawner: a spawn frame that does not parse\n");
    exit(2);
  }
  char **argv = calloc((size_t)argc + 2, sizeof *argv);
  if (argv == NULL) die("calloc");
  argv[0] = argv0 != NULL ? argv0 : command;
  for (uint32_t i = 0; i < argc; i++) argv[i + 1] = args[i];

  struct start s = {.command = command, .cwd = cwd, .argv = argv, .envp = env, .has_ids = has_ids,
                    .uid = (uid_t)uid, .gid = (gid_t)gid, .nfds = n > 3 ? n : 3, .err = 0};
  int ours[MAX_STDIO]; /* our end of each pipe */
  int err = 0;
  for (int i = 0; i < MAX_STDIO; i++) ours[i] = -1;
  for (int i = 0; i < MAX_FDS; i++) s.fds[i] = -1;
  /* (uid_t)-1 means "no change" to the kernel: never a task's id. Refused for this start only. */
  if (has_ids && (uid == UINT32_MAX || gid == UINT32_MAX)) err = EINVAL;
  if (err == 0 && file_path != NULL) {
    int f = open(file_path, O_RDONLY | O_CLOEXEC);
    s.fds[file_fd] = f < 0 ? -1 : high(f);
    if (f < 0 || s.fds[file_fd] < 0) err = errno;
    s.nfds = file_fd + 1;
  }
  for (int i = 0; i < s.nfds && i < MAX_STDIO && err == 0; i++) {
    if (i < n && stdio[i] == 1 && i > 0) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) < 0) {
        err = errno;
        break;
      }
      /* fd 4 is read by the process; 1-3 are written by it */
      int theirs = i == 4 ? p[0] : p[1];
      ours[i] = high(i == 4 ? p[1] : p[0]);
      s.fds[i] = high(theirs);
      if (ours[i] < 0 || s.fds[i] < 0) {
        err = errno;
        break;
      }
    } else if (i <= 2) {
      s.fds[i] = devnull; /* stdin always; an unasked stdout or stderr as Node's 'ignore' */
    }
  }
  pid_t pid = -1;
  if (err == 0) {
    pid = start_process(&s);
    if (pid < 0) err = s.err;
  }
  for (int i = 0; i < MAX_FDS; i++)
    if (s.fds[i] >= 0 && s.fds[i] != devnull) close(s.fds[i]);
  if (pid < 0) {
    for (int i = 0; i < MAX_STDIO; i++)
      if (ours[i] >= 0) close(ours[i]);
    send_error(id, command, err);
  } else {
    if (nkids == capkids) {
      capkids = capkids == 0 ? 16 : capkids * 2;
      kids = realloc(kids, capkids * sizeof *kids);
      if (kids == NULL) die("realloc");
    }
    kids[nkids++] = (struct kid){.id = id, .pid = pid, .in_fd = ours[4]};
    if (ours[4] >= 0 && fcntl(ours[4], F_SETFL, O_NONBLOCK) < 0) die("fcntl");
    char line[160];
    snprintf(line, sizeof line, "{\"t\":\"spawned\",\"id\":%u,\"pid\":%d}\n", id, (int)pid);
    send_line(line);
    for (int i = 1; i <= 3; i++) {
      if (ours[i] < 0) continue;
      snprintf(line, sizeof line,
               "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Socket\",\"msg\":{\"t\":\"fd\",\"id\":%u,\"fd\":%d}}\n",
               id, i);
      send_fd_line(line, ours[i]);
      close(ours[i]); /* the worker holds it now */
    }
  }
  free(command);
  free(argv0);
  free(file_path);
  free(cwd);
  free_strs(args);
  free_strs(env);
  free(argv);
}

/* Writes what it can of a kid's fd 4; closes it once all is written or the reader is gone. */
static void pump_input(struct kid *k) {
  while (k->in_off < k->in_len) {
    ssize_t w = write(k->in_fd, k->in_buf + k->in_off, k->in_len - k->in_off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    if (w < 0) break; /* EPIPE: it is gone; nothing to do */
    k->in_off += (size_t)w;
  }
  close_input(k);
}

static void input_frame(struct reader *r) {
  uint32_t id = u32(r);
  if (r->bad) {
    fprintf(stderr, "gpu-broker-spawner: an input frame that does not parse\n");
    exit(2);
  }
  struct kid *k = kid_of(id);
  if (k == NULL || k->in_fd < 0 || k->in_asked) return; /* gone, or written already: once only */
  k->in_asked = 1;
  k->in_len = (size_t)(r->end - r->p);
  k->in_buf = malloc(k->in_len + 1);
  if (k->in_buf == NULL) die("malloc");
  memcpy(k->in_buf, r->p, k->in_len);
  pump_input(k);
}

static unsigned char *inbuf;
static size_t inlen, incap;

/* Reads what stdin has; handles every whole frame. */
static void read_frames(void) {
  if (incap - inlen < 65536) {
    incap = incap == 0 ? 262144 : incap * 2;
    inbuf = realloc(inbuf, incap);
    if (inbuf == NULL) die("realloc");
  }
  ssize_t n = read(0, inbuf + inlen, incap - inlen);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) exit(0); /* the worker is gone */
  inlen += (size_t)n;
  size_t off = 0;
  while (inlen - off >= 4) {
    uint32_t len = (uint32_t)inbuf[off] | (uint32_t)inbuf[off + 1] << 8 | (uint32_t)inbuf[off + 2] << 16 |
                   (uint32_t)inbuf[off + 3] << 24;
    if (len == 0 || len > MAX_FRAME) {
      fprintf(stderr, "gpu-broker-spawner: a frame of %u bytes\n", len);
      exit(2);
    }
    if (inlen - off - 4 < len) {
      if ((size_t)len + 4 > incap) {
        incap = (size_t)len + 4;
        unsigned char *b = realloc(inbuf, incap);
        if (b == NULL) die("realloc");
        inbuf = b;
      }
      break;
    }
    struct reader r = {.p = inbuf + off + 5, .end = inbuf + off + 4 + len, .bad = 0};
    unsigned char kind = inbuf[off + 4];
    if (kind == 'S') spawn_frame(&r);
    else if (kind == 'I') input_frame(&r);
    else {
      fprintf(stderr, "gpu-broker-spawner: a frame of unknown kind %u\n", kind);
      exit(2);
    }
    off += 4 + (size_t)len;
  }
  memmove(inbuf, inbuf + off, inlen - off);
  inlen -= off;
}

static void reap(int sfd) {
  struct signalfd_siginfo si;
  while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
  }
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (size_t i = 0; i < nkids; i++) {
      if (kids[i].pid != pid) continue;
      uint32_t id = kids[i].id;
      forget(i);
      send_exit(id, status);
      break;
    }
  }
}

int main(void) {
  /* Nothing inherited beyond stdin (the frames), stdout, stderr and the channel reaches a task. */
  if (syscall(SYS_close_range, CHANNEL_FD + 1, ~0U, 0) != 0) die("close_range");
  for (int fd = 0; fd <= CHANNEL_FD; fd++)
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) die("fcntl");
  devnull = high(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (devnull < 0) die("open /dev/null");
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0) die("sigprocmask");
  int sfd = high(signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC));
  if (sfd < 0) die("signalfd");
  char drop[4096];
  for (;;) {
    size_t nfds = 3 + nkids;
    struct pollfd *pfd = calloc(nfds, sizeof *pfd);
    if (pfd == NULL) die("calloc");
    pfd[0] = (struct pollfd){.fd = 0, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = CHANNEL_FD, .events = POLLIN};
    pfd[2] = (struct pollfd){.fd = sfd, .events = POLLIN};
    for (size_t i = 0; i < nkids; i++)
      pfd[3 + i] = (struct pollfd){.fd = kids[i].in_buf != NULL ? kids[i].in_fd : -1, .events = POLLOUT};
    if (poll(pfd, nfds, -1) < 0) {
      free(pfd);
      if (errno == EINTR) continue;
      die("poll");
    }
    /* Input first: its pipes belong to kids that may be reaped below. */
    for (size_t i = 0; i < nkids && 3 + i < nfds; i++)
      if (pfd[3 + i].revents != 0 && kids[i].in_buf != NULL) pump_input(&kids[i]);
    if (pfd[2].revents & POLLIN) reap(sfd);
    if (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(CHANNEL_FD, drop, sizeof drop); /* acknowledgements */
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) exit(0);
    }
    if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) read_frames();
    free(pfd);
  }
}
