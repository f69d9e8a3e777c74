/*
 * Experiment (ADR 0036 amendment), not part of the worker: how much of a sandboxed task's start is the
 * kernel's namespace work, and how much is bwrap, setpriv and env as programs. A per-task launcher that
 * enters a mount namespace prepared once (a bwrap sandbox holding `sleep`), makes the task's own mount,
 * PID, IPC, UTS (and, with FRESHNET, network) namespaces as a private copy of it, mounts a fresh /tmp and
 * /dev/shm, moves in the task dir it cloned before entering (open_tree + move_mount), mounts /proc, drops
 * to nobody with no_new_privs and execs the task; INIT adds a PID-1 process between it and the task.
 *
 * usage: launch HOLDER_PID TASK_DIR PROGRAM [ARG...]   (as root; see run.sh)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <grp.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <net/if.h>
#include <signal.h>
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x4
#endif
#define DIE(m) do { perror(m); _exit(126); } while (0)
// launch HOLDERPID TASKDIR
int main(int argc, char **argv) {
  char p[64];
  int tree = syscall(SYS_open_tree, AT_FDCWD, argv[2], OPEN_TREE_CLONE | O_CLOEXEC);
  if (tree < 0) DIE("open_tree");
  snprintf(p, sizeof p, "/proc/%s/ns/mnt", argv[1]); int mnt = open(p, O_RDONLY | O_CLOEXEC);
  snprintf(p, sizeof p, "/proc/%s/ns/net", argv[1]); int net = open(p, O_RDONLY | O_CLOEXEC);
  if (mnt < 0 || net < 0) DIE("ns open");
  if (setns(mnt, CLONE_NEWNS)) DIE("setns mnt");
  int freshnet = getenv("FRESHNET") != NULL;
  if (!freshnet && setns(net, CLONE_NEWNET)) DIE("setns net");
  if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (freshnet ? CLONE_NEWNET : 0))) DIE("unshare");
  if (freshnet) { int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); struct ifreq r; memset(&r, 0, sizeof r); strcpy(r.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &r)) DIE("lo get"); r.ifr_flags |= IFF_UP; if (ioctl(s, SIOCSIFFLAGS, &r)) DIE("lo up"); close(s); }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) DIE("private");
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")) DIE("tmp");
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")) DIE("shm");
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, "/task", MOVE_MOUNT_F_EMPTY_PATH)) DIE("move_mount");
  int withinit = getenv("INIT") != NULL;
  pid_t q = fork();
  if (q == 0 && withinit) {
    pid_t t = fork();
    if (t != 0) { int st; pid_t w; while ((w = wait(&st)) != t) if (w < 0) _exit(126); _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)); }
  }
  if (q == 0) {
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) DIE("proc");
    if (chdir("/task")) DIE("chdir");
    setgroups(0, NULL); if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)) DIE("uid");
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    char *env[] = {"PATH=/usr/bin", NULL};
    execve(argv[3], argv + 3, env); DIE("exec");
  }
  int st; if (waitpid(q, &st, 0) < 0) DIE("wait");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
