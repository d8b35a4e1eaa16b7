/*
 * Stand-in for the nginx test images critest uses (e2e-test-images/nginx, hostnet-nginx).
 * What the specs check of nginx, and this program does:
 *  - /var/run/nginx.pid holds the pid of a process named "nginx" (pidof nginx finds it);
 *  - that process's /proc/PID/cmdline contains "master process" (it re-execs itself with
 *    nginx's master argv0);
 *  - HTTP GET / answers 200 on $NGINX_PORT (default 80): a busybox httpd child serves
 *    /usr/share/nginx/html.
 * SIGTERM/SIGINT/SIGQUIT stop the child and exit 0. Children are reaped (it may be PID 1).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SELF "/usr/sbin/nginx"
#define MASTER "nginx: master process nginx -g daemon off;"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv) {
	(void)argc;
	if (strcmp(argv[0], MASTER) != 0) {
		char *nargv[] = {MASTER, NULL};
		execv(SELF, nargv);
		perror("nginx: re-exec");
		return 1;
	}
	const char *port = getenv("NGINX_PORT");
	if (port == NULL || *port == '\0')
		port = "80";

	FILE *f = fopen("/var/run/nginx.pid", "w");
	if (f == NULL) {
		perror("nginx: /var/run/nginx.pid");
		return 1;
	}
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);

	pid_t child = fork();
	if (child < 0) {
		perror("nginx: fork");
		return 1;
	}
	if (child == 0) {
		execl("/bin/busybox", "httpd", "-f", "-p", port, "-h", "/usr/share/nginx/html", (char *)NULL);
		perror("nginx: exec busybox httpd");
		_exit(127);
	}
	fprintf(stderr, "nginx stand-in: master %d, busybox httpd %d on port %s\n", (int)getpid(), (int)child, port);

	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (stop) {
			kill(child, SIGTERM);
			while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
				;
			return 0;
		}
		if (pid == child)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		if (pid < 0 && errno != EINTR)
			return 1;
	}
}
