/*
 * pause: the first process of every pod sandbox on the local provider.
 *
 * It holds the pod's namespaces open, does nothing, and exits cleanly on SIGTERM or
 * SIGINT. As PID 1 of the pod's PID namespace (shareProcessNamespace) it inherits
 * orphans, so it reaps every child that exits to keep zombies from piling up.
 * Built with `gcc -static` so the image needs nothing but this file.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef VERSION
#define VERSION "unknown"
#endif

static void shutdown_on(int signo) {
	/* A stop request is the normal end of a sandbox: exit 0 so it is not reported as a crash. */
	(void)signo;
	_exit(0);
}

static void reap_children(int signo) {
	(void)signo;
	/* One SIGCHLD may stand for several exits: collect them all without blocking. */
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

static int install(int signo, void (*handler)(int), int flags) {
	struct sigaction action;
	memset(&action, 0, sizeof(action));
	action.sa_handler = handler;
	action.sa_flags = flags;
	sigemptyset(&action.sa_mask);
	return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
	if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
		printf("kuberay-conformance pause %s\n", VERSION);
		return 0;
	}
	if (getpid() != 1) {
		/* Still useful outside a PID namespace (tests), but children of others are not ours to reap. */
		fprintf(stderr, "pause: warning: not running as PID 1\n");
	}
	if (install(SIGINT, shutdown_on, 0) < 0 || install(SIGTERM, shutdown_on, 0) < 0 ||
	    install(SIGCHLD, reap_children, SA_NOCLDSTOP | SA_RESTART) < 0) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;) {
		pause();
	}
	return 42; /* not reached */
}
