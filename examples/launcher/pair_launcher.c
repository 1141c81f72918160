/*
 * pair_launcher.c: runs one example pair's server and clients as threads of
 * one process, on whatever NIC the process's librpma uses (the harness's fake
 * NIC by default). Each pair also runs as separate processes: on the fake
 * NIC through the multiprocess launcher (tools/multiprocess, one fresh
 * fabric; //examples:<dir>_two_process_test), on rxe through
 * tools/softroce_vm/run.sh --pairs.
 *
 *   pair_launcher ADDR PORT NCLIENTS [SERVER_ARG...] -- [CLIENT_ARG...]
 *
 * The server's main() and the client's main() are linked in renamed
 * (-Dmain=example_server_main / example_client_main). The clients start once
 * the server's rpma_ep_listen() has returned (the link wraps it:
 * -Wl,--wrap=rpma_ep_listen), all at once; "%i" in a client argument becomes
 * the client's index. Exit status 0 only if the server and every client
 * returned 0.
 */
#include <librpma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int example_server_main(int argc, char **argv);
int example_client_main(int argc, char **argv);

int __real_rpma_ep_listen(struct rpma_peer *peer, const char *addr,
                          const char *port, struct rpma_ep **ep_ptr);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t listened = PTHREAD_COND_INITIALIZER;
static int listen_state; /* 0: not yet, 1: listening, -1: listen failed */

int __wrap_rpma_ep_listen(struct rpma_peer *peer, const char *addr,
                          const char *port, struct rpma_ep **ep_ptr) {
  int ret = __real_rpma_ep_listen(peer, addr, port, ep_ptr);
  pthread_mutex_lock(&mu);
  listen_state = ret == 0 ? 1 : -1;
  pthread_cond_broadcast(&listened);
  pthread_mutex_unlock(&mu);
  return ret;
}

#define MAX_ARGS 32
#define MAX_CLIENTS 16

struct side {
  int (*main_fn)(int, char **);
  int argc;
  char *argv[MAX_ARGS + 1];
  char storage[MAX_ARGS][64];
  int ret;
  pthread_t thread;
};

static void *run_side(void *arg) {
  struct side *s = arg;
  s->ret = s->main_fn(s->argc, s->argv);
  if (s->main_fn == example_server_main) {
    /* A server that returns before listening must not leave clients waiting. */
    pthread_mutex_lock(&mu);
    if (listen_state == 0) listen_state = -1;
    pthread_cond_broadcast(&listened);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

/* argv[0], addr, port, then args with "%i" replaced by index. */
static int build_argv(struct side *s, const char *name, const char *addr,
                      const char *port, char **args, int nargs, int index) {
  if (nargs + 3 > MAX_ARGS) return -1;
  const char *fixed[3] = {name, addr, port};
  s->argc = 0;
  for (int i = 0; i < nargs + 3; ++i) {
    const char *src = i < 3 ? fixed[i] : args[i - 3];
    char *dst = s->storage[i];
    size_t o = 0;
    for (const char *p = src; *p != '\0' && o + 12 < sizeof(s->storage[i]);
         ++p) {
      if (p[0] == '%' && p[1] == 'i') {
        o += (size_t)snprintf(dst + o, sizeof(s->storage[i]) - o, "%d", index);
        ++p;
      } else {
        dst[o++] = *p;
      }
    }
    dst[o] = '\0';
    s->argv[s->argc++] = dst;
  }
  s->argv[s->argc] = NULL;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: %s ADDR PORT NCLIENTS [SERVER_ARG...] -- [CLIENT_ARG...]\n",
            argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  int nclients = atoi(argv[3]);
  int sep = 4;
  while (sep < argc && strcmp(argv[sep], "--") != 0) ++sep;
  char **server_args = argv + 4;
  int n_server_args = sep - 4;
  char **client_args = argv + (sep < argc ? sep + 1 : argc);
  int n_client_args = sep < argc ? argc - sep - 1 : 0;
  if (nclients < 1 || nclients > MAX_CLIENTS) {
    fprintf(stderr, "launcher: NCLIENTS must be 1..%d\n", MAX_CLIENTS);
    return 2;
  }

  static struct side server;
  static struct side clients[MAX_CLIENTS];
  server.main_fn = example_server_main;
  if (build_argv(&server, "server", addr, port, server_args, n_server_args,
                 0)) {
    fprintf(stderr, "launcher: too many server arguments\n");
    return 2;
  }
  if (pthread_create(&server.thread, NULL, run_side, &server) != 0) {
    perror("pthread_create");
    return 1;
  }

  pthread_mutex_lock(&mu);
  while (listen_state == 0) pthread_cond_wait(&listened, &mu);
  int state = listen_state;
  pthread_mutex_unlock(&mu);

  int started = 0;
  if (state == 1) {
    for (; started < nclients; ++started) {
      struct side *c = &clients[started];
      c->main_fn = example_client_main;
      if (build_argv(c, "client", addr, port, client_args, n_client_args,
                     started) ||
          pthread_create(&c->thread, NULL, run_side, c) != 0) {
        fprintf(stderr, "launcher: cannot start client %d\n", started);
        break;
      }
    }
  } else {
    fprintf(stderr, "launcher: the server did not listen; no client runs\n");
  }
  int failed = state != 1 || started != nclients;
  for (int i = 0; i < started; ++i) {
    pthread_join(clients[i].thread, NULL);
    printf("launcher: client %d exited %d\n", i, clients[i].ret);
    failed |= clients[i].ret != 0;
  }
  pthread_join(server.thread, NULL);
  printf("launcher: server exited %d\n", server.ret);
  failed |= server.ret != 0;
  printf("launcher: %s\n", failed ? "FAILED" : "server and clients passed");
  return failed ? 1 : 0;
}
