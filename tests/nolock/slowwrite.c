/* A slow disk, for the tests: every write(2) to a file under $BAKE_TEST_SLOW_UNDER first sleeps
 * $BAKE_TEST_SLOW_MS milliseconds, so that a copy into node storage stays in progress, making
 * progress, for as long as a test needs to watch it. Nothing else changes. Loaded with LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "under.h"

ssize_t write(int fd, const void *buf, size_t count) {
	static ssize_t (*real)(int, const void *, size_t);
	const char *ms = getenv("BAKE_TEST_SLOW_MS");
	if (real == NULL)
		real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (ms != NULL && under_prefix(fd, "BAKE_TEST_SLOW_UNDER")) {
		struct timespec nap = {atol(ms) / 1000, (atol(ms) % 1000) * 1000000L};
		nanosleep(&nap, NULL);
	}
	return real(fd, buf, count);
}
