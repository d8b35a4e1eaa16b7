/*
 * Stand-in for e2e-test-images/nonewprivs: installed setuid root and run as USER 1000.
 * Without no_new_privs the setuid bit gives it euid 0; with no_new_privs it keeps euid 1000.
 */
#include <stdio.h>
#include <unistd.h>

int main(void) {
	printf("Effective uid: %d\n", (int)geteuid());
	return 0;
}
