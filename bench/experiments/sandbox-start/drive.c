/* Experiment driver (ADR 0036 amendment): runs argv[2..] argv[1] times in a row, fork + exec + wait, and fails on the first non-zero status. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
  int n = atoi(argv[1]);
  for (int i = 0; i < n; i++) {
    pid_t p = fork();
    if (p == 0) { execv(argv[2], argv + 2); _exit(127); }
    int st; waitpid(p, &st, 0); if (st) { fprintf(stderr, "fail %d\n", st); return 1; }
  }
  return 0;
}
