/* A wall clock that steps, for the tests: every call that reads the realtime clock (clock_gettime
 * with CLOCK_REALTIME, gettimeofday, time) gets it $BAKE_TEST_CLOCK_STEP seconds ahead, then
 * behind, then ahead again, call after call, as an NTP step or a VM restore moves it. The monotonic
 * clock is left alone: a program that judges time with it sees nothing. Loaded with LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long step(void) {
	static int calls;
	const char *text = getenv("BAKE_TEST_CLOCK_STEP");
	long seconds = text ? atol(text) : 0;
	return (calls++ % 2 == 0) ? seconds : -seconds;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	static int (*real)(clockid_t, struct timespec *);
	int rc;
	if (real == NULL)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	rc = real(id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		ts->tv_sec += step();
	return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	(void)tz;
	clock_gettime(CLOCK_REALTIME, &ts);
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *out) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (out != NULL)
		*out = ts.tv_sec;
	return ts.tv_sec;
}
