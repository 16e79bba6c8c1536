/* NFS without lockd, for the tests: flock(2) and fcntl(2)'s lock commands fail with ENOLCK on any
 * file under $BAKE_TEST_NOLOCK_UNDER, as they do on an NFS volume mounted without working locks.
 * With BAKE_TEST_FLOCK=succeed, flock(2) there succeeds instead, for every caller, and locks
 * nothing: a lock that does not exclude, as NFS with local_lock=flock or Lustre's localflock is
 * across nodes. Nothing else changes: opens, reads, writes, renames and links behave as the
 * filesystem does.
 * Loaded with LD_PRELOAD, it reaches every dynamically linked tool (util-linux flock exits 71,
 * Python raises OSError errno 37); statically linked ones (busybox's applets) are out of its reach.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "under.h"

static int is_lock_command(int cmd) {
	switch (cmd) {
	case F_SETLK: case F_SETLKW: case F_GETLK:
#ifdef F_OFD_SETLK
	case F_OFD_SETLK: case F_OFD_SETLKW: case F_OFD_GETLK:
#endif
		return 1;
	}
	return 0;
}

int flock(int fd, int operation) {
	static int (*real)(int, int);
	const char *mode = getenv("BAKE_TEST_FLOCK");
	if (under_prefix(fd, "BAKE_TEST_NOLOCK_UNDER")) {
		if (mode != NULL && strcmp(mode, "succeed") == 0)
			return 0;
		errno = ENOLCK;
		return -1;
	}
	if (real == NULL)
		real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
	return real(fd, operation);
}

static int forward(const char *name, int fd, int cmd, void *arg) {
	int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);
	if (is_lock_command(cmd) && under_prefix(fd, "BAKE_TEST_NOLOCK_UNDER")) {
		errno = ENOLCK;
		return -1;
	}
	return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...) {
	va_list ap;
	void *arg;
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return forward("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
	va_list ap;
	void *arg;
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return forward("fcntl64", fd, cmd, arg);
}
