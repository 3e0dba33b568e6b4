/* nncov runtime: receives the SanitizerCoverage init callbacks of every instrumented
 * library in the process and lets a reader (the llvm collector, through ctypes) find
 * each library's 8-bit counters and pc table.
 *
 * Load it with RTLD_GLOBAL (or LD_PRELOAD) before any instrumented library: those
 * libraries leave __sanitizer_cov_8bit_counters_init and __sanitizer_cov_pcs_init
 * undefined and will not load without them.
 *
 * A region is one library: its counters [start, stop) (one uint8 per instrumented
 * edge) and its pc table [beg, end) (pairs of absolute PC and flags, one pair per
 * counter, flags bit 0 = function entry). Regions are never removed: a library that
 * is unloaded leaves a dangling region, so do not dlclose instrumented libraries.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NNCOV_API __attribute__((visibility("default")))
/* A process loads a few instrumented libraries, not thousands; a fixed table keeps the
 * callbacks free of allocation (they run inside the dynamic loader's constructors). */
#define NNCOV_MAX_REGIONS 1024

struct nncov_region {
    uint8_t *counters_start, *counters_stop;
    const uintptr_t *pcs_beg, *pcs_end;
};

static struct nncov_region regions[NNCOV_MAX_REGIONS];
static size_t n_regions;
static size_t n_dropped;

NNCOV_API void __sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop) {
    if (start == stop)
        return;
    /* Every translation unit's module constructor calls this with the same section
     * bounds of its library: keep one region per library. */
    for (size_t i = 0; i < n_regions; i++)
        if (regions[i].counters_start == start)
            return;
    if (n_regions == NNCOV_MAX_REGIONS) {
        n_dropped++;
        return;
    }
    regions[n_regions].counters_start = start;
    regions[n_regions].counters_stop = stop;
    n_regions++;
}

NNCOV_API void __sanitizer_cov_pcs_init(const uintptr_t *beg, const uintptr_t *end) {
    if (beg == end)
        return;
    size_t n_pcs = (size_t)(end - beg) / 2;
    for (size_t i = 0; i < n_regions; i++)
        if (regions[i].pcs_beg == beg)
            return;
    /* The constructor that registered the counters registers the pcs next; pair the
     * table with the latest region of the same length that has none yet. */
    for (size_t i = n_regions; i-- > 0;) {
        struct nncov_region *r = &regions[i];
        if (r->pcs_beg == NULL && (size_t)(r->counters_stop - r->counters_start) == n_pcs) {
            r->pcs_beg = beg;
            r->pcs_end = end;
            return;
        }
    }
}

/* Query API (ctypes). Indices run over regions in registration order. */

NNCOV_API size_t nncov_regions(void) { return n_regions; }

/* Regions lost because the table was full (0 unless a process loads > 1024 libraries). */
NNCOV_API size_t nncov_dropped(void) { return n_dropped; }

NNCOV_API uint8_t *nncov_counters_start(size_t i) { return i < n_regions ? regions[i].counters_start : NULL; }

NNCOV_API uint8_t *nncov_counters_end(size_t i) { return i < n_regions ? regions[i].counters_stop : NULL; }

NNCOV_API const uintptr_t *nncov_pcs_start(size_t i) { return i < n_regions ? regions[i].pcs_beg : NULL; }

NNCOV_API const uintptr_t *nncov_pcs_end(size_t i) { return i < n_regions ? regions[i].pcs_end : NULL; }

struct nncov_lookup {
    uintptr_t addr;
    const char *path;
    uintptr_t bias;
    int found;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct nncov_lookup *q = data;
    for (int k = 0; k < info->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (q->addr >= lo && q->addr < lo + ph->p_memsz) {
            q->path = info->dlpi_name;
            q->bias = info->dlpi_addr;
            q->found = 1;
            return 1;
        }
    }
    return 0;
}

/* The library holding region i: its path as the loader knows it ("" for the main
 * program) and its load bias (absolute PC - bias = the address in the ELF file).
 * Returns 0 when the region is not inside any loaded object (it was unloaded). */
NNCOV_API int nncov_region_object(size_t i, const char **path, uintptr_t *bias) {
    if (i >= n_regions)
        return 0;
    struct nncov_lookup q = {(uintptr_t)regions[i].counters_start, NULL, 0, 0};
    dl_iterate_phdr(find_object, &q);
    if (!q.found)
        return 0;
    *path = q.path;
    *bias = q.bias;
    return 1;
}
