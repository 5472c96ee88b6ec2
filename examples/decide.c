/*
 * decide.c -- the README's C example, whole: open a client, decide a
 * problem, wait for it to be tuned, decide again (now from the process
 * cache).  Built by `make examples` and run against a CPU-backend daemon
 * by tests/integration/test_examples.sh.
 *
 *   cc -Ibuild/include examples/decide.c build/libflyclient.a -lcjson -lpthread
 *   FLYTUNED_SOCKET=$PWD/.state/gpu0.sock ./a.out [KEY]
 */
#include <stdio.h>
#include <stdlib.h>

#include <flyclient.h>

static const char *status_name(uint32_t s)
{
	return s == FLY_STATUS_TUNED ? "tuned" :
	       s == FLY_STATUS_PENDING ? "pending" : "default";
}

int main(int argc, char **argv)
{
	const char *key = argc > 1 ? argv[1] : "rmsnorm/fp32/m=64,n=4096";
	fly_client *c;
	struct fly_problem p;
	struct fly_decision d;
	int rc;

	rc = fly_client_open(NULL, &c); /* $FLYTUNED_SOCKET, else
					   /run/flytuned/gpu0.sock */
	if (rc < 0) {
		fprintf(stderr, "open failed: %s (%d)\n", fly_strerror(rc), rc);
		return EXIT_FAILURE;
	}
	rc = fly_problem_from_key(key, &p); /* or fill p's fields */
	if (rc < 0) {
		fprintf(stderr, "bad key %s: %s (%d)\n", key, fly_strerror(rc),
			rc);
		fly_client_close(c);
		return EXIT_FAILURE;
	}
	fly_decide(c, &p, &d); /* never waits for tuning */
	printf("decide: %s variant '%s'\n", status_name(d.status), d.variant);
	rc = fly_decide_wait(c, &p, 60000, &d);
	if (rc < 0) {
		fprintf(stderr, "decide_wait failed: %s (%d): %s\n",
			fly_strerror(rc), rc, fly_client_errmsg(c));
		fly_client_close(c);
		return EXIT_FAILURE;
	}
	fly_decide(c, &p, &d);
	printf("tuned: %s variant '%s' nparams %u median %.3f us\n",
	       status_name(d.status), d.variant, d.nparams, d.median_us);
	fly_client_close(c);
	return d.status == FLY_STATUS_TUNED ? EXIT_SUCCESS : EXIT_FAILURE;
}
