/*
 * test_gpu_faults.c -- RELIABILITY.md F9 on the real GPU: GPU faults
 * injected one after another into the real daemon's benchmarks (issue 21
 * item 6).
 *
 * Starts BUILD/flytuned (the production daemon) on the GPU backend with
 * FLYTUNED_KERNELS_DIR=BUILD/testing, the test build of the GPU kernel
 * library (kernels/testing/gpu_faulty.hip), and FLYK_TESTING_FAULTS=@FILE.
 * Before each fault it writes one fault's name into FILE (gpu_trap,
 * gpu_oob, gpu_hang, gpu_nan, gpu_oom in turn), so that exactly that
 * test variant is a candidate, then tunes a fresh rmsnorm key (a new n
 * each time: nothing cached) with `tune wait`.  Per fault it checks:
 *   - the daemon's pid is the one it started, alive (0 daemon restarts),
 *     and its /proc/PID/maps holds no GPU runtime (libcuda, libamdhip64,
 *     libhsa-runtime): the daemon's context is never touched;
 *   - the key was tuned, its winner not a test_ variant;
 *   - explain shows the fault variant's trial with the expected outcome
 *     (trap, oob, hang: faulted; nan: wrong; oom: error);
 *   - trap, oob, hang replaced the worker (status worker.restarts went up
 *     and its pid changed); nan and oom did not;
 *   - keys tuned before the storm are answered tuned, with the same
 *     variant and params, while each fault's job runs (a decide every
 *     ~50 ms) and after the storm; their decide round trips against the
 *     ones before the storm (F9's p99).
 * It also stands in for systemd's watchdog (NOTIFY_SOCKET, WATCHDOG_USEC
 * = GPU_FAULTS_WATCHDOG_S, default 30 as in systemd/flytuned@.service)
 * and reports the longest gap between the daemon's WATCHDOG=1 pings: one
 * longer than the period is a daemon restart under systemd, and fails
 * the test (until e53123b the daemon stopped pinging while its worker was
 * degraded: 0 pings in the 95 s of 100 faults on the H200).
 * Prints one summary line ("gpu faults: 100 injected (...), daemon
 * restarts 0, ...") and exits 0, 1 on any failure, or 77 (skipped) when
 * there is no GPU or no test kernel library.
 *
 * Environment: GPU_FAULTS (default 100), GPU_FAULT_KINDS (default
 * "trap,oob,hang,nan,oom"), GPU_FAULTS_BACKEND ("cuda"; "hip" on AMD),
 * GPU_FAULTS_TIMEOUT_S (candidate_timeout_s, default 2),
 * GPU_FAULTS_BUDGET_S (job_budget_s, default 1), GPU_FAULTS_MAX_S (stop
 * injecting past this wall time, default 390: the summary is still
 * printed, the run fails), GPU_FAULTS_LOG (copy the daemon's log there);
 * FLY_TEST_FLYTUNED
 * overrides the daemon binary, FLY_TEST_KEEP keeps its directory.
 * GPU_FAULTS_BACKEND=cpu runs the same loop on the CPU backend's test
 * variants (crash, hang, wrong) in BUILD/flytuned-test: this program's
 * own check on a machine without a GPU.
 *
 * Never loads a GPU library itself: all GPU work is the daemon's worker's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "daemon.h"

#define MAX_KINDS 8
#define NSTABLE 4
#define MAX_LAT 200000
#define TUNE_TIMEOUT_MS 120000
#define POLL_MS 50

struct kind {
	char name[16];    /* "trap" */
	char fault[24];   /* its FLYK_TESTING_FAULTS item: "gpu_trap" */
	char variant[32]; /* its variant: "test_gpu_trap" */
	const char *want; /* the culprit's trial outcome */
	int kills;        /* 1: the worker must be replaced */
	int injected;
	double secs;      /* wall time of its faults' jobs */
};

struct fstats {
	int injected;
	int failed;           /* faults with any check failing */
	int worker_restarts;  /* status worker.restarts at the end */
	int winners_faulty;   /* a test_ variant won */
	int culprits_seen;    /* the culprit's trial found as expected */
	int worker_replaced;  /* kill kinds that replaced the worker */
	int worker_kept;      /* other kinds that kept it */
	long served;          /* stable-key decides answered as before */
	long queries;
	int degraded_seen;    /* status said "degraded" */
	int daemon_lost;      /* the daemon we started is gone */
	int notify_fd;        /* our stand-in for systemd's notify socket */
	int pings;            /* WATCHDOG=1 received */
	double last_ping;     /* when the last came (or READY=1) */
	double max_gap;       /* the longest wait between two */
	double lat_base[MAX_LAT];
	int nbase;
	double lat_storm[MAX_LAT];
	int nstorm;
};

static struct fstats st;

static const char *const stable_keys[NSTABLE] = {
	"rmsnorm/bf16/m=256,n=4096",
	"rmsnorm/fp16/m=32,n=8192",
	"rmsnorm/fp32/m=1024,n=2048",
	"rmsnorm/bf16/m=8,n=16384",
};

struct stable {
	char variant[64];
	char params[128];
};

static struct stable stable_want[NSTABLE];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static double env_num(const char *name, double dflt)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? atof(v) : dflt;
}

/* One request; NULL on a transport error (printed). */
static cJSON *req(int fd, const char *json, int timeout_ms)
{
	char *resp = NULL;
	cJSON *o;
	int rc = fly_test_request(fd, json, &resp, timeout_ms);

	if (rc != 0) {
		fprintf(stderr, "request %s: rc %d\n", json, rc);
		return NULL;
	}
	o = cJSON_Parse(resp);
	free(resp);
	return o;
}

static int is_ok(const cJSON *o)
{
	return o != NULL && cJSON_IsTrue(cJSON_GetObjectItem(o, "ok"));
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);

	if (b != NULL)
		x = cJSON_GetObjectItemCaseSensitive(x, b);
	return cJSON_IsString(x) ? x->valuestring : "";
}

static double num_at(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);

	if (b != NULL)
		x = cJSON_GetObjectItemCaseSensitive(x, b);
	return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

/* The decision's variant and params ("[1,2,3]") of a decide or tune
 * response. */
static void decision_of(const cJSON *o, char *var, size_t vcap, char *par,
			size_t pcap)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "decision");
	char *p = cJSON_PrintUnformatted(
		cJSON_GetObjectItemCaseSensitive(d, "params"));

	snprintf(var, vcap, "%s", str_at(d, "variant", NULL));
	snprintf(par, pcap, "%s", p != NULL ? p : "");
	free(p);
}

/* The daemon is the process we started, alive, and has no GPU runtime
 * mapped.  @return 0 or -1 (printed). */
static int daemon_intact(const struct fly_test_daemon *d, pid_t pid0)
{
	static const char *const gpu_libs[] = {"libcuda.so", "libamdhip64",
					       "libhsa-runtime", "libcudart",
					       "libflykernels_"};
	char path[64], line[512];
	FILE *f;
	int st_, bad = 0;

	if (d->pid != pid0 || waitpid(pid0, &st_, WNOHANG) != 0 ||
	    kill(pid0, 0) != 0) {
		fprintf(stderr, "FAIL: the daemon (pid %d) is gone\n",
			(int)pid0);
		st.daemon_lost = 1;
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid0);
	f = fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "FAIL: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (!bad && fgets(line, sizeof(line), f) != NULL)
		for (size_t i = 0; i < sizeof(gpu_libs) / sizeof(*gpu_libs);
		     i++)
			if (strstr(line, gpu_libs[i]) != NULL) {
				fprintf(stderr, "FAIL: the daemon maps %s",
					line);
				bad = 1;
			}
	fclose(f);
	return bad ? -1 : 0;
}

/* Read what the daemon sent to the notify socket: READY=1 starts the
 * watchdog clock, each WATCHDOG=1 ends a gap (systemd kills the service
 * when one exceeds WatchdogSec: 30 s in systemd/flytuned@.service). */
static void watchdog_drain(void)
{
	char buf[512];
	ssize_t n;

	while (st.notify_fd >= 0 &&
	       (n = recv(st.notify_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) >
		       0) {
		double t = now_s();

		buf[n] = '\0';
		if (strstr(buf, "READY=1") != NULL && st.last_ping == 0)
			st.last_ping = t;
		if (strstr(buf, "WATCHDOG=1") == NULL)
			continue;
		st.pings++;
		if (st.last_ping > 0 && t - st.last_ping > st.max_gap)
			st.max_gap = t - st.last_ping;
		st.last_ping = t;
	}
}

/* status: the worker's pid and restart count, and whether degraded. */
static int worker_state(int fd, int *pid, int *restarts)
{
	cJSON *o = req(fd, "{\"req\":\"status\"}", 10000);

	if (!is_ok(o)) {
		cJSON_Delete(o);
		return -1;
	}
	*pid = (int)num_at(o, "worker", "pid");
	*restarts = (int)num_at(o, "worker", "restarts");
	if (strcmp(str_at(o, "state", NULL), "degraded") == 0)
		st.degraded_seen++;
	cJSON_Delete(o);
	return 0;
}

/* Decide stable key @p i; count it served when tuned and unchanged.
 * @p lat, @p n: where its round trip goes. */
static void query_stable(int fd, int i, double *lat, int *n)
{
	char json[160], var[64], par[128];
	double t0 = now_s();
	cJSON *o;

	snprintf(json, sizeof(json), "{\"req\":\"decide\",\"key\":\"%s\"}",
		 stable_keys[i]);
	o = req(fd, json, 10000);
	if (*n < MAX_LAT)
		lat[(*n)++] = (now_s() - t0) * 1e3;
	st.queries++;
	if (is_ok(o) && strcmp(str_at(o, "decision", "status"), "tuned") ==
				0) {
		decision_of(o, var, sizeof(var), par, sizeof(par));
		if (strcmp(var, stable_want[i].variant) == 0 &&
		    strcmp(par, stable_want[i].params) == 0)
			st.served++;
		else
			fprintf(stderr, "FAIL: %s now %s %s, was %s %s\n",
				stable_keys[i], var, par,
				stable_want[i].variant, stable_want[i].params);
	} else {
		fprintf(stderr, "FAIL: %s not served tuned\n", stable_keys[i]);
	}
	cJSON_Delete(o);
}

/* Send `tune wait` for @p key on @p fd and wait for its answer, deciding
 * the stable keys on @p other meanwhile.  @return the response or NULL. */
static cJSON *tune_wait(int fd, int other, const char *key, int storm)
{
	int timeout = fly_test_timeout(TUNE_TIMEOUT_MS);
	uint64_t end = (uint64_t)(now_s() * 1e3) + (uint64_t)timeout + 5000;
	char json[256], *resp = NULL;
	cJSON *o;
	int q = 0;

	snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":\"%s\","
		 "\"wait\":true,\"timeout_ms\":%d}", key, timeout);
	if (fly_test_send_frame(fd, json) != 0)
		return NULL;
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		watchdog_drain();
		if (poll(&pfd, 1, POLL_MS) == 1)
			break;
		if (storm)
			query_stable(other, q++ % NSTABLE, st.lat_storm,
				     &st.nstorm);
		if ((uint64_t)(now_s() * 1e3) > end) {
			fprintf(stderr, "FAIL: no answer to tune %s\n", key);
			return NULL;
		}
	}
	if (fly_test_recv_frame(fd, &resp, 10000) != 0)
		return NULL;
	o = cJSON_Parse(resp);
	free(resp);
	return o;
}

/* Whether explain of @p key has a trial of @p variant with @p outcome. */
static int culprit_recorded(int fd, const char *key, const char *variant,
			    const char *outcome)
{
	char json[200];
	const cJSON *t;
	int found = 0;
	cJSON *o;

	snprintf(json, sizeof(json), "{\"req\":\"explain\",\"key\":\"%s\"}",
		 key);
	o = req(fd, json, 10000);
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(o, "trials"))
		if (strcmp(str_at(t, "variant", NULL), variant) == 0 &&
		    strcmp(str_at(t, "outcome", NULL), outcome) == 0)
			found = 1;
	if (!found) {
		char *txt = o != NULL ? cJSON_PrintUnformatted(o) : NULL;

		fprintf(stderr, "FAIL: explain %s: no %s trial %s: %s\n", key,
			variant, outcome, txt != NULL ? txt : "(no answer)");
		free(txt);
	}
	cJSON_Delete(o);
	return found;
}

/* Name the one enabled fault (atomically: the worker reads it at every
 * feasible()). */
static int set_fault(const char *file, const char *fault)
{
	char tmp[600];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", file);
	f = fopen(tmp, "w");
	if (f == NULL)
		return -errno;
	fprintf(f, "%s\n", fault);
	if (fclose(f) != 0)
		return -EIO;
	return rename(tmp, file) == 0 ? 0 : -errno;
}

/* Tune the stable keys with no fault enabled; remember their winners. */
static int tune_stable(int fd, int other)
{
	for (int i = 0; i < NSTABLE; i++) {
		cJSON *o = tune_wait(fd, other, stable_keys[i], 0);

		if (!is_ok(o) ||
		    strcmp(str_at(o, "status", NULL), "tuned") != 0) {
			fprintf(stderr, "FAIL: stable key %s not tuned\n",
				stable_keys[i]);
			cJSON_Delete(o);
			return -1;
		}
		decision_of(o, stable_want[i].variant,
			    sizeof(stable_want[i].variant),
			    stable_want[i].params,
			    sizeof(stable_want[i].params));
		cJSON_Delete(o);
	}
	for (int r = 0; r < 50; r++)
		query_stable(other, r % NSTABLE, st.lat_base, &st.nbase);
	return 0;
}

/* One fault: @p k enabled, key number @p i.  @return 0 or -1. */
static int one_fault(const struct fly_test_daemon *d, pid_t pid0, int fd,
		     int other, const char *file, struct kind *k, int i)
{
	const char *fault = k->fault, *variant = k->variant;
	char key[96], var[64], par[128];
	int wpid0, wr0, wpid1, wr1, bad = 0;
	cJSON *o;

	/* n: a multiple of 8 that no other key of the run has */
	snprintf(key, sizeof(key), "rmsnorm/bf16/m=64,n=%d", 1024 + 8 * i);
	if (set_fault(file, fault) < 0 ||
	    worker_state(other, &wpid0, &wr0) < 0)
		return -1;
	k->injected++;
	st.injected++;
	double t0 = now_s();
	o = tune_wait(fd, other, key, 1);
	k->secs += now_s() - t0;
	if (!is_ok(o) || strcmp(str_at(o, "status", NULL), "tuned") != 0) {
		char *txt = o != NULL ? cJSON_PrintUnformatted(o) : NULL;

		fprintf(stderr, "FAIL: %s (%s) not tuned: %s\n", key, fault,
			txt != NULL ? txt : "(no answer)");
		free(txt);
		cJSON_Delete(o);
		return -1;
	}
	decision_of(o, var, sizeof(var), par, sizeof(par));
	cJSON_Delete(o);
	if (strncmp(var, "test_", 5) == 0 || var[0] == '\0') {
		fprintf(stderr, "FAIL: %s won with %s\n", key, var);
		st.winners_faulty++;
		bad = 1;
	}
	if (culprit_recorded(other, key, variant, k->want))
		st.culprits_seen++;
	else
		bad = 1;
	if (worker_state(other, &wpid1, &wr1) < 0)
		return -1;
	if (k->kills && wr1 > wr0 && wpid1 != wpid0) {
		st.worker_replaced++;
	} else if (!k->kills && wr1 == wr0 && wpid1 == wpid0) {
		st.worker_kept++;
	} else {
		fprintf(stderr, "FAIL: %s (%s): worker pid %d -> %d, "
			"restarts %d -> %d\n", key, fault, wpid0, wpid1, wr0,
			wr1);
		bad = 1;
	}
	st.worker_restarts = wr1;
	if (daemon_intact(d, pid0) < 0)
		return -1;
	return bad ? -1 : 0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double p99(double *v, int n)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return v[(int)((n - 1) * 0.99)];
}

/* The kinds to cycle through: GPU_FAULT_KINDS, else all of the backend's
 * (on "cpu", the CPU test variants of kernels/testing/faulty.c: a self-test
 * of this program without a GPU). */
static int parse_kinds(const char *backend, struct kind *k)
{
	const char *env = getenv("GPU_FAULT_KINDS");
	int cpu = strcmp(backend, "cpu") == 0;
	char buf[128], *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", env != NULL && *env ? env
			 : cpu ? "crash,hang,wrong" : "trap,oob,hang,nan,oom");
	for (char *t = strtok_r(buf, ",", &save); t && n < MAX_KINDS;
	     t = strtok_r(NULL, ",", &save)) {
		memset(&k[n], 0, sizeof(k[n]));
		snprintf(k[n].name, sizeof(k[n].name), "%s", t);
		snprintf(k[n].fault, sizeof(k[n].fault), "%s%s",
			 cpu ? "" : "gpu_", t);
		snprintf(k[n].variant, sizeof(k[n].variant), "test_%s",
			 k[n].fault);
		if (!strcmp(t, "trap") || !strcmp(t, "oob") ||
		    !strcmp(t, "hang") || !strcmp(t, "crash")) {
			k[n].want = "faulted";
			k[n].kills = 1;
		} else if (!strcmp(t, "nan") || !strcmp(t, "wrong")) {
			k[n].want = "wrong";
		} else if (!strcmp(t, "oom")) {
			k[n].want = "error";
		} else {
			fprintf(stderr, "GPU_FAULT_KINDS: unknown '%s'\n", t);
			return -1;
		}
		n++;
	}
	return n;
}

/* Skip (77) without a GPU device node or the test kernel library. */
static int gpu_present(const char *backend, const char *lib)
{
	const char *node = strcmp(backend, "hip") == 0 ? "/dev/kfd"
						       : "/dev/nvidiactl";

	if (strcmp(backend, "cpu") == 0)
		return 1;
	if (access(node, F_OK) != 0) {
		printf("gpu faults: SKIP: no GPU (%s absent)\n", node);
		return 0;
	}
	if (access(lib, R_OK) != 0) {
		printf("gpu faults: SKIP: %s not built (make BUILD=... "
		       "GPU=%s %s)\n", lib, backend, lib);
		return 0;
	}
	return 1;
}

/* Copy the daemon's log to $GPU_FAULTS_LOG, when set (the device session
 * keeps it), before its directory goes. */
static void keep_log(const struct fly_test_daemon *d)
{
	const char *to = getenv("GPU_FAULTS_LOG");
	char buf[65536];
	FILE *in, *out;
	size_t n;

	if (to == NULL || *to == '\0' || d->log[0] == '\0')
		return;
	in = fopen(d->log, "r");
	out = fopen(to, "w");
	while (in != NULL && out != NULL &&
	       (n = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, n, out);
	if (in != NULL)
		fclose(in);
	if (out != NULL)
		fclose(out);
}

/* Print the summary lines.  @return 0, or -1 when the watchdog pings
 * stopped for longer than systemd's period (the daemon would have been
 * restarted: F9 says 0 daemon restarts). */
static int summary(const struct kind *k, int nk, double wall)
{
	char kinds[256] = "";
	size_t off = 0;

	for (int i = 0; i < nk; i++)
		off += (size_t)snprintf(kinds + off, sizeof(kinds) - off,
					"%s%d %s", i ? ", " : "", k[i].injected,
					k[i].name);
	printf("gpu faults: %d injected (%s), daemon restarts %d, worker "
	       "restarts %d, winners faulty %d, culprits recorded %d/%d, "
	       "other keys served %.1f%% (%ld/%ld), decide p99 %.2f ms "
	       "(before %.2f ms), degraded seen %d, failed %d, wall %.0f s\n",
	       st.injected, kinds, st.daemon_lost, st.worker_restarts, st.winners_faulty,
	       st.culprits_seen, st.injected,
	       st.queries ? 100.0 * (double)st.served / (double)st.queries
			  : 0.0,
	       st.served, st.queries, p99(st.lat_storm, st.nstorm),
	       p99(st.lat_base, st.nbase), st.degraded_seen, st.failed, wall);
	watchdog_drain();
	if (st.last_ping > 0 && now_s() - st.last_ping > st.max_gap)
		st.max_gap = now_s() - st.last_ping;
	printf("gpu faults: watchdog (WATCHDOG_USEC as systemd's WatchdogSec="
	       "%g s): %d pings, longest gap %.1f s: systemd %s have "
	       "restarted the daemon\n", env_num("GPU_FAULTS_WATCHDOG_S", 30),
	       st.pings, st.max_gap,
	       st.max_gap > env_num("GPU_FAULTS_WATCHDOG_S", 30) ? "WOULD"
								: "would not");
	off = 0;
	for (int i = 0; i < nk; i++)
		off += (size_t)snprintf(kinds + off, sizeof(kinds) - off,
					"%s%s %.1f s", i ? ", " : "", k[i].name,
					k[i].injected ? k[i].secs /
							k[i].injected : 0.0);
	printf("gpu faults: mean tune wall per fault: %s\n", kinds);
	return st.notify_fd >= 0 &&
			       st.max_gap > env_num("GPU_FAULTS_WATCHDOG_S", 30)
		       ? -1
		       : 0;
}

/* Start the daemon; *pid0 its pid.  @return 0 or -1 (printed). */
static int start(struct fly_test_daemon *d, const char *backend,
		 const char *envs[5], pid_t *pid0)
{
	char cfg[256];
	int rc;

	snprintf(cfg, sizeof(cfg), "{\"backend\":\"%s\","
		 "\"candidate_timeout_s\":%g,\"job_budget_s\":%g,"
		 "\"policy\":\"on-request\"}", backend,
		 env_num("GPU_FAULTS_TIMEOUT_S", 2),
		 env_num("GPU_FAULTS_BUDGET_S", 1));
	rc = fly_test_daemon_start(d, cfg, envs);
	if (rc < 0) {
		fprintf(stderr, "FAIL: daemon start: %d\n", rc);
		fly_test_daemon_print_log(d);
		return -1;
	}
	*pid0 = d->pid;
	return daemon_intact(d, *pid0);
}

int main(void)
{
	static struct fly_test_daemon d;
	static char kdir[600], lib[700], fenv[600], kenv[700], file[520];
	static char nsock[520], nenv[600], wenv[64];
	const char *backend = getenv("GPU_FAULTS_BACKEND");
	const char *envs[5] = {fenv, kenv, nenv, wenv, NULL};
	char exe[600], tmp[] = "/tmp/flygpufaults.XXXXXX";
	struct kind k[MAX_KINDS];
	int n = env_int("GPU_FAULTS", 100), nk, fd, other, rc = 1;
	double max_s = env_num("GPU_FAULTS_MAX_S", 390);
	pid_t pid0 = 0;
	double t0 = now_s();

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	backend = backend != NULL && *backend ? backend : "cuda";
	nk = parse_kinds(backend, k);
	if (nk <= 0)
		return 1;
	snprintf(kdir, sizeof(kdir), "%s/testing", FLY_BUILD_DIR);
	snprintf(lib, sizeof(lib), "%s/libflykernels_%s.so", kdir, backend);
	if (!gpu_present(backend, lib))
		return 77;
	/* the production daemon; on cpu the test build (the CPU test
	 * variants are linked into it) */
	if (getenv("FLY_TEST_FLYTUNED") == NULL) {
		snprintf(exe, sizeof(exe), "%s/flytuned%s", FLY_BUILD_DIR,
			 strcmp(backend, "cpu") == 0 ? "-test" : "");
		setenv("FLY_TEST_FLYTUNED", exe, 1);
	}
	if (mkdtemp(tmp) == NULL)
		return 1;
	snprintf(file, sizeof(file), "%s/faults", tmp);
	snprintf(fenv, sizeof(fenv), "FLYK_TESTING_FAULTS=@%s", file);
	snprintf(kenv, sizeof(kenv), "FLYTUNED_KERNELS_DIR=%s", kdir);
	/* systemd's watchdog, as the unit sets it: the daemon pings only
	 * while its worker is healthy (< 3 restarts in 60 s) */
	snprintf(nsock, sizeof(nsock), "%s/notify", tmp);
	snprintf(nenv, sizeof(nenv), "NOTIFY_SOCKET=%s", nsock);
	snprintf(wenv, sizeof(wenv), "WATCHDOG_USEC=%.0f",
		 env_num("GPU_FAULTS_WATCHDOG_S", 30) * 1e6);
	st.notify_fd = fly_test_notify_listen(nsock);
	if (set_fault(file, "none") < 0 || start(&d, backend, envs, &pid0) < 0)
		goto out;
	fd = fly_test_connect(d.sock);
	other = fly_test_connect(d.sock);
	if (fd < 0 || other < 0 || tune_stable(fd, other) < 0)
		goto out;
	printf("gpu faults: daemon pid %d, %d stable keys tuned, %d faults "
	       "of %d kinds next\n", (int)pid0, NSTABLE, n, nk);
	for (int i = 0; i < n; i++) {
		int r = one_fault(&d, pid0, fd, other, file, &k[i % nk], i);

		if (r < 0)
			st.failed++;
		if (daemon_intact(&d, pid0) < 0)
			break;
		if ((i + 1) % 10 == 0)
			printf("gpu faults: %d/%d done, %d failed, %.0f s\n",
			       i + 1, n, st.failed, now_s() - t0);
		if (i + 1 < n && now_s() - t0 > max_s) {
			printf("gpu faults: FAIL: stopped after %d of %d: "
			       "past GPU_FAULTS_MAX_S=%.0f s\n", i + 1, n,
			       max_s);
			break;
		}
	}
	(void)set_fault(file, "none");
	for (int r = 0; r < 20; r++)
		query_stable(other, r % NSTABLE, st.lat_storm, &st.nstorm);
	if (daemon_intact(&d, pid0) == 0 && st.failed == 0 &&
	    st.injected == n && st.served == st.queries)
		rc = 0;
	if (summary(k, nk, now_s() - t0) < 0)
		rc = 1;
out:
	if (rc != 0)
		fly_test_daemon_print_log(&d);
	fly_test_daemon_stop(&d);
	keep_log(&d);
	fly_test_daemon_cleanup(&d);
	unlink(file);
	if (st.notify_fd >= 0)
		close(st.notify_fd);
	unlink(nsock);
	rmdir(tmp);
	printf("gpu faults: %s\n", rc == 0 ? "PASS" : "FAIL");
	return rc;
}
