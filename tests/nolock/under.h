/* Whether the file open on fd is at or under the directory named by the environment variable `var`
 * (resolved through /proc/self/fd): the one test the shims beside this file make before they act. */
#ifndef BAKE_TEST_UNDER_H
#define BAKE_TEST_UNDER_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int under_prefix(int fd, const char *var) {
	const char *prefix = getenv(var);
	char link[64], path[4096];
	ssize_t n;
	size_t len;
	if (prefix == NULL || *prefix == '\0')
		return 0;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n < 0)
		return 0;
	path[n] = '\0';
	len = strlen(prefix);
	return strncmp(path, prefix, len) == 0 && (path[len] == '/' || path[len] == '\0');
}
#endif
