/*
 * devid.c -- the GPU device's identity and the flush-buffer sizing
 * (contracts in kernels/gpu/devid.h).  Plain C with no GPU headers, built
 * into every kernel library and unit-tested without a GPU.
 *
 * Owns: nothing beyond a call; flyk_smi_query() opens and closes ROCm SMI
 * within the call.  Thread: see devid.h.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "gpu/devid.h"

int flyk_devid_fingerprint(const struct flyk_devid *id, char *buf,
			   size_t cap)
{
	int n, m;

	if (!id->arch || !id->name || !id->lib || !id->blas || !id->dnn)
		return -EINVAL;
	n = snprintf(buf, cap,
		     "arch=%s units=%d clock_mhz=%d mem_clock_mhz=%d "
		     "driver=%d runtime=%d l2_kb=%zu lib=%s blas=%s dnn=%s "
		     "name=\"%s\"",
		     id->arch, id->units, id->clock_mhz, id->mem_clock_mhz,
		     id->driver_version, id->runtime_version,
		     id->l2_bytes / 1024, id->lib, id->blas, id->dnn,
		     id->name);
	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	if (!id->amd)
		return n;
	m = snprintf(buf + n, cap - (size_t)n,
		     " llc_kb=%zu power_cap_w=%u kdriver=%s",
		     id->llc_bytes / 1024, id->smi ? id->smi->power_cap_w : 0,
		     id->smi && id->smi->kdriver[0] ? id->smi->kdriver
						    : "none");
	if (m < 0 || (size_t)m >= cap - (size_t)n)
		return -ENOSPC;
	return n + m;
}

/* AMD parts whose Infinity Cache (MALL) the HIP runtime may not report:
 * CDNA3 MI300A/X (gfx940-942) and CDNA4 MI350/355 (gfx950), 256 MiB each.
 * CDNA2 (gfx90a) and CDNA1 (gfx908) have none. */
static const struct {
	const char *arch;
	unsigned mib;
} gfx_llc[] = {
	{ "gfx940", 256 }, { "gfx941", 256 }, { "gfx942", 256 },
	{ "gfx950", 256 },
};

size_t flyk_gfx_llc_bytes(const char *arch)
{
	size_t len;

	if (!arch)
		return 0;
	len = strcspn(arch, ":"); /* "gfx942:sramecc+:xnack-" */
	for (size_t i = 0; i < sizeof(gfx_llc) / sizeof(gfx_llc[0]); i++)
		if (strlen(gfx_llc[i].arch) == len &&
		    strncmp(gfx_llc[i].arch, arch, len) == 0)
			return (size_t)gfx_llc[i].mib << 20;
	return 0;
}

size_t flyk_flush_bytes(size_t l2_bytes, size_t llc_bytes)
{
	size_t big = l2_bytes > llc_bytes ? l2_bytes : llc_bytes;
	size_t b = 4 * big;

	if (b < FLYK_FLUSH_MIN_BYTES)
		b = FLYK_FLUSH_MIN_BYTES;
	return b;
}

/* ------------------------------------------------------------ KFD */

/* The value of "KEY value" in the KFD properties file @p path, or -1. */
static long long kfd_prop(const char *path, const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	long long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			v = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* The largest "size" (KiB) among NODE/caches/x/properties, in bytes. */
static size_t kfd_node_cache_max(const char *node)
{
	char path[1024];
	size_t best = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%s/caches", node);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/caches/%s/properties",
			     node, e->d_name) >= (int)sizeof(path))
			continue;
		long long kib = kfd_prop(path, "size");
		if (kib > 0 && (size_t)kib * 1024 > best)
			best = (size_t)kib * 1024;
	}
	closedir(d);
	return best;
}

size_t flyk_kfd_cache_bytes(const char *root, int domain, int bus,
			    int device)
{
	long long want = (long long)((bus & 0xff) << 8 | (device & 0x1f) << 3);
	char node[768], path[1024];
	size_t best = 0;
	struct dirent *e;
	DIR *d;

	snprintf(node, sizeof(node), "%s/nodes",
		 root ? root : "/sys/class/kfd/kfd/topology");
	d = opendir(node);
	if (!d)
		return 0;
	while (best == 0 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(node, sizeof(node), "%s/nodes/%s",
			     root ? root : "/sys/class/kfd/kfd/topology",
			     e->d_name) >= (int)sizeof(node) ||
		    snprintf(path, sizeof(path), "%s/properties", node) >=
			    (int)sizeof(path))
			continue;
		long long loc = kfd_prop(path, "location_id");
		long long dom = kfd_prop(path, "domain");
		if (loc >= 0 && (loc & ~7LL) == want && (dom < 0 || dom == domain))
			best = kfd_node_cache_max(node);
	}
	closedir(d);
	return best;
}

/* ------------------------------------------------------------ ROCm SMI */

/* The rocm_smi.h entry points used, declared here so that the build needs
 * no librocm-smi-dev (rsmi_status_t is an enum, 0 = success;
 * RSMI_SW_COMP_DRIVER = 0). */
struct rsmi_fns {
	int (*init)(uint64_t flags);
	int (*shut_down)(void);
	int (*num_devices)(uint32_t *n);
	int (*pci_id)(uint32_t dv, uint64_t *bdfid);
	int (*power_cap)(uint32_t dv, uint32_t sensor, uint64_t *uw);
	int (*version_str)(int component, char *buf, uint32_t len);
};

static const char *const smi_libs[] = {
	"librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6",
	"librocm_smi64.so.5", "librocm_smi64.so.1",
};

static void *smi_open(const char *lib)
{
	void *h = NULL;

	if (lib)
		return dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; !h && i < sizeof(smi_libs) / sizeof(smi_libs[0]);
	     i++)
		h = dlopen(smi_libs[i], RTLD_NOW | RTLD_LOCAL);
	return h;
}

/* dlsym into a function pointer (POSIX guarantees the conversion). */
#define SMI_SYM(h, f, name) \
	(*(void **)(&(f)) = dlsym((h), (name)), (f) != NULL)

static int smi_bind(void *h, struct rsmi_fns *f)
{
	if (SMI_SYM(h, f->init, "rsmi_init") &&
	    SMI_SYM(h, f->shut_down, "rsmi_shut_down") &&
	    SMI_SYM(h, f->num_devices, "rsmi_num_monitor_devices") &&
	    SMI_SYM(h, f->pci_id, "rsmi_dev_pci_id_get") &&
	    SMI_SYM(h, f->power_cap, "rsmi_dev_power_cap_get") &&
	    SMI_SYM(h, f->version_str, "rsmi_version_str_get"))
		return 0;
	return -ENOSYS;
}

/* SMI's index of the device at domain:bus:device (BDFID = domain << 32 |
 * bus << 8 | device << 3 | function; the function is ignored). */
static int smi_find(const struct rsmi_fns *f, int domain, int bus,
		    int device, uint32_t *dv)
{
	uint64_t want = (uint64_t)(uint32_t)domain << 32 |
			(uint64_t)(bus & 0xff) << 8 |
			(uint64_t)(device & 0x1f) << 3;
	uint32_t n = 0;

	if (f->num_devices(&n) != 0)
		return -ENODEV;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t id = 0;
		if (f->pci_id(i, &id) == 0 && (id & ~(uint64_t)7) == want) {
			*dv = i;
			return 0;
		}
	}
	return -ENODEV;
}

int flyk_smi_query(const char *lib, int domain, int bus, int device,
		   struct flyk_smi *out)
{
	struct rsmi_fns f;
	uint64_t uw = 0;
	uint32_t dv = 0;
	void *h;
	int rc;

	memset(out, 0, sizeof(*out));
	h = smi_open(lib);
	if (!h)
		return -ENOENT;
	rc = smi_bind(h, &f);
	if (rc < 0)
		goto out_close;
	rc = -ENODEV;
	if (f.init(0) != 0)
		goto out_close;
	rc = smi_find(&f, domain, bus, device, &dv);
	if (rc == 0) {
		if (f.power_cap(dv, 0, &uw) == 0)
			out->power_cap_w = (unsigned)(uw / 1000000);
		if (f.version_str(0, out->kdriver, sizeof(out->kdriver)) != 0)
			out->kdriver[0] = '\0';
		out->kdriver[sizeof(out->kdriver) - 1] = '\0';
		/* one token in the fingerprint */
		for (char *c = out->kdriver; *c; c++)
			if (*c == ' ' || *c == '"')
				*c = '_';
	}
	(void)f.shut_down();
out_close:
	dlclose(h);
	return rc;
}
