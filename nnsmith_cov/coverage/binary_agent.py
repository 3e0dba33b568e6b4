"""The Frida agent the binary collector loads into a worker: a Stalker transform in C and its RPC.

The parent loads `AGENT_JS` into the worker and calls `init(params)` once, then
`locate(params)` once. The agent compiles `TRANSFORM_C` (Frida's built-in C compiler)
and follows two threads in turn, each exactly once:

- `init`: the thread that imports the backends ("import mode"). Nothing is counted;
  the transform only hides AVX-512 from XGETBV (below), so that the module, whose CPU
  checks run while it loads, picks kernels that Stalker does not corrupt.
- `locate`: once the module is loaded and its place known, the import thread is let go
  and the measuring thread, fresh and never followed before, is followed for the
  worker's life ("measuring mode"; following anew per test would recompile every block
  each time). At the head of every block inside the module the transform writes a few
  instructions that bump the block's slot in a hit map the *worker* owns (a numpy array
  it zeroes and reads itself), so a test costs no RPC:

    lea rsp, [rsp-128] ; push rax       ; step over the red zone
    lahf ; seto al ; push rax            ; the flags, overflow included
    mov rax, <map + slot>
    add byte [rax], 1 ; adc byte [rax], 0   ; saturate at 255 instead of wrapping to 0
    pop rax ; add al, 127 ; sahf         ; overflow back from al, the rest from ah
    pop rax ; lea rsp, [rsp+128]

Returns. Stalker keeps real return addresses on the stack and turns every `ret` into a
lookup in a two-entry inline cache per return site; a function called from many places
(allocators, small C++ helpers, CPython's own helpers) misses it nearly every time and
each miss is a full context switch into Stalker (all vector state saved, zmm16-31 and
the mask registers too on AVX-512 hosts). That was most of the cost per test. In
measuring mode the transform therefore records every block it compiles in a table
(real address -> compiled address; 4-way buckets of 64 bytes) and puts a probe in
front of each `ret`: the return address is looked up and, when found, the compiled
block is entered directly (`ret imm16` through a slot below the red zone, so no
register or flag of the program changes); otherwise Stalker's own return path runs as
before. Entries only ever point at blocks of the measuring thread's one context (the
import thread never records), and Stalker keeps a block's first address valid for the
context's life (a recompiled block that moves leaves a jump there, and is recorded
again), so a hit is always an entry that Stalker itself would have taken.

Generated code. TVM's LLVM JIT maps fresh anonymous memory for each module it builds
(constant folding builds and runs some while compiling) and frees it after; the kernel hands
the same addresses out again, and Stalker, trusting blocks from their first run, then ran the
old module's translation there (TVM died under the agent with a SIGSEGV). Anonymous mappings the
followed modules request without an address therefore get a hint never used before
(`placeGeneratedCode`): new code always lands at new addresses. Stalker's own checks cannot do
this (its trust threshold compares a block's bytes only until it is trusted, and at -1 nothing is
linked, far too slow). Invalidating the blocks of a range when it is made executable again
(`Stalker.invalidate` from an mprotect hook, on the followed thread) was tried first: the worker
crashed soon after the first invalidation, not pursued. The cost: the translations of freed code
stay in Stalker's cache, which grows with every module TVM builds.

AVX-512. With `clear_avx512` (hosts with AVX-512) the transform clears bits 5-7 of EAX
after every XGETBV the followed threads run, so the module believes the OS keeps no
AVX-512 state and picks its AVX2 kernels: Stalker's own context switch does not
preserve the upper halves of zmm0-15, which corrupts results computed by AVX-512
kernels. Some of those checks run lazily, at the first session, so the first session
must be created on the measuring thread (the worker's self-check does that).

Slabs. Stalker writes a thread's translated code into 4 MiB slabs, each placed within 2 GiB of the
thread's context but not of each other: two slabs can lie up to 4 GiB apart. A jump it backpatches
from a block in one slab to a block in another then takes the 16-byte absolute form, written into
room left for a 5-byte relative jump, over the code that follows (the taken side of a conditional
branch): the next time that side runs, the thread executes the middle of the jump's target address.
That killed about 2 worker starts in 5 once TVM was followed (its libraries, loaded while the import
thread is followed, push new mappings gigabytes away from the context; ORT's do not). The agent
therefore places Stalker's memory itself (`on_mmap`, on libc's mmap from before the first follow):
when a context asks for its first slab, every free 4 MiB chunk within 1.875 GiB of it is reserved
(PROT_NONE), the 1.75 GiB span holding the most is kept as its window and the rest given back; its
slabs then go to the reserved chunks nearest the context, so any two lie less than 2 GiB apart, and
libraries loaded later cannot take the space first (the cost: up to 1.75 GiB of address space per
context, which counts against `--worker-mem-mb`). `stats()` counts the requests
placed (`slabs_near`) and those a full window left to Stalker (`slabs_far`, 0 in practice).

params (all addresses as decimal strings; `start` holds ELF virtual addresses at `init`, and at
`locate` the followed modules' function ranges at their load addresses, with `base` 0 and
[`lo`, `hi`) spanning their mappings):
    {"tid": 4242, "base": "...", "lo": "...", "hi": "...", "map": "...", "n": 44186,
     "start": "...", "length": "...", "slot_base": "...", "slot_mask": "...", "clear_avx512": 0,
     "exclude": [["<address>", "<size>"], ...]}   # at `locate`: ranges run natively (Stalker.exclude)
"""

from __future__ import annotations

BUCKET_BITS = 16  # 65,536 buckets of 4 entries: room for the ~100k blocks a worker compiles
FRESH_CODE_BASE = 0x100000000000  # where generated code is placed, ever upwards (see placeGeneratedCode)

TRANSFORM_C = r"""
#include <gum/guminterceptor.h>
#include <gum/gumspinlock.h>
#include <gum/gumstalker.h>

#define BUCKET_BITS @BUCKET_BITS@
#define RET_SAVED 168  /* below the return address: red zone 128, target slot, rax, flags, rcx, rdx */

typedef struct {
  guint64 base, lo, hi, map, n, start, length, slot_base, slot_mask, clear_avx512;
  guint64 blocks, outside, table, fast_returns, slabs_near, slabs_far;
} Params;

extern Params params;

static gint64
slot_of (guint64 off)
{
  const guint64 * start = (const guint64 *) params.start;
  const guint64 * length = (const guint64 *) params.length;
  gint64 lo = 0, hi = (gint64) params.n - 1, f = -1;
  while (lo <= hi)
  {
    gint64 mid = (lo + hi) / 2;
    if (start[mid] <= off) { f = mid; lo = mid + 1; } else { hi = mid - 1; }
  }
  if (f < 0 || off >= start[f] + length[f])
    return -1;
  guint32 h = (guint32) (off - start[f]) * 2654435761u;
  h ^= h >> 15;
  return (gint64) ((const guint32 *) params.slot_base)[f] + (h & ((const guint32 *) params.slot_mask)[f]);
}

/* Machine code is assembled here byte by byte: Gum's x86 writer mis-encodes some base
   registers (r12, r13) and its register moves, which this code needs exactly. */
typedef struct { guint8 b[192]; guint n; } Code;

static void put1 (Code * c, guint8 x) { c->b[c->n++] = x; }
static void put4 (Code * c, guint32 x) { for (int i = 0; i < 4; i++) put1 (c, (guint8) (x >> (8 * i))); }
static void put8 (Code * c, guint64 x) { for (int i = 0; i < 8; i++) put1 (c, (guint8) (x >> (8 * i))); }
static void put_all (Code * c, const guint8 * s, guint n) { for (guint i = 0; i < n; i++) put1 (c, s[i]); }

/* je rel32 with its target filled in by land() */
static guint je32 (Code * c) { put1 (c, 0x0f); put1 (c, 0x84); put4 (c, 0); return c->n; }
static void land (Code * c, guint after)
{
  guint32 rel = c->n - after;
  for (int i = 0; i < 4; i++)
    c->b[after - 4 + i] = (guint8) (rel >> (8 * i));
}

/* Flags through rax without pushfq/popfq (slow): lahf keeps SF ZF AF PF CF, seto keeps OF;
   on the way back add al, 127 overflows exactly when al was 1, then sahf restores the rest. */
static const guint8 flags_save[] = { 0x9f, 0x0f, 0x90, 0xc0, 0x50 };   /* lahf; seto al; push rax */
static const guint8 flags_restore[] = { 0x58, 0x04, 0x7f, 0x9e };      /* pop rax; add al, 127; sahf */

static void
emit_bump (GumX86Writer * cw, guint64 cell)
{
  static const guint8 enter[] = { 0x48, 0x8d, 0x64, 0x24, 0x80, 0x50 };   /* lea rsp, [rsp-128]; push rax */
  static const guint8 bump[] = { 0x80, 0x00, 0x01, 0x80, 0x10, 0x00 };    /* add byte [rax], 1; adc byte [rax], 0 */
  /* pop rax; lea rsp, [rsp+128] */
  static const guint8 leave[] = { 0x58, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00 };
  Code c = { {0}, 0 };
  put_all (&c, enter, sizeof (enter));
  put_all (&c, flags_save, sizeof (flags_save));
  put1 (&c, 0x48); put1 (&c, 0xb8); put8 (&c, cell);                       /* mov rax, cell */
  put_all (&c, bump, sizeof (bump));
  put_all (&c, flags_restore, sizeof (flags_restore));
  put_all (&c, leave, sizeof (leave));
  gum_x86_writer_put_bytes (cw, c.b, c.n);
}

static void
emit_clear_avx512 (GumX86Writer * cw)
{
  /* and eax, 0xffffff1f: the OS "saves" no opmask / ZMM state, as far as the module sees */
  static const guint8 clear[] = { 0x25, 0x1f, 0xff, 0xff, 0xff };
  gum_x86_writer_put_lea_reg_reg_offset (cw, GUM_X86_RSP, GUM_X86_RSP, -128);
  gum_x86_writer_put_pushfx (cw);
  gum_x86_writer_put_bytes (cw, clear, sizeof (clear));
  gum_x86_writer_put_popfx (cw);
  gum_x86_writer_put_lea_reg_reg_offset (cw, GUM_X86_RSP, GUM_X86_RSP, 128);
}

/* The bytes released by a `ret` (its imm16 plus the address), or -1 for other instructions.
   Read from the code itself: bnd/rep prefixes allowed. */
static gint
ret_release (const cs_insn * insn)
{
  const guint8 * p = (const guint8 *) insn->address;
  const guint8 * end = p + insn->size;
  while (p < end && (*p == 0xf2 || *p == 0xf3))
    p++;
  if (p + 1 == end && *p == 0xc3)
    return 8;
  if (p + 3 == end && *p == 0xc2)
    return 8 + (p[1] | (p[2] << 8));
  return -1;
}

static guint64 *
bucket_of (guint64 real)
{
  return (guint64 *) (params.table + (((real ^ (real >> 15)) & ((1u << BUCKET_BITS) - 1)) << 6));
}

static void
remember (guint64 real, guint64 code)
{
  guint64 * bucket = bucket_of (real);
  int way = -1;
  for (int w = 0; w < 4 && way < 0; w++)
    if (bucket[2 * w] == real || bucket[2 * w] == ~0ull)
      way = w;
  if (way < 0)
    way = (int) ((real >> 4) & 3);  /* full: evict one; its block just goes back to Stalker's path */
  bucket[2 * way + 1] = code;
  bucket[2 * way] = real;
}

void
clear_table (void)
{
  guint64 * t = (guint64 *) params.table;
  for (guint64 i = 0; i < (4ull << BUCKET_BITS); i++)
  {
    t[2 * i] = ~0ull;  /* no user-space address */
    t[2 * i + 1] = 0;
  }
}

static void
emit_fast_return (GumX86Writer * cw, gint release)
{
  /* lea rsp, [rsp-136] (red zone + target slot); push rax; <flags>; push rcx; push rdx;
     mov rax, [rsp+RET_SAVED] (the return address) */
  static const guint8 enter[] = { 0x48, 0x8d, 0xa4, 0x24, 0x78, 0xff, 0xff, 0xff, 0x50 };
  static const guint8 load[] = { 0x51, 0x52, 0x48, 0x8b, 0x84, 0x24, RET_SAVED, 0x00, 0x00, 0x00 };
  /* rcx = ((rax >> 15) ^ rax) & mask, then * 64 + table */
  static const guint8 hash[] = { 0x48, 0x89, 0xc1, 0x48, 0xc1, 0xe9, 0x0f, 0x48, 0x31, 0xc1, 0x81, 0xe1 };
  static const guint8 scale[] = { 0x48, 0xc1, 0xe1, 0x06, 0x48, 0xba };
  static const guint8 probe[] = { 0x48, 0x01, 0xd1, 0x48, 0x39, 0x01 };         /* add rcx, rdx; cmp [rcx], rax */
  static const guint8 next_probe[] = { 0x48, 0x83, 0xc1, 0x10, 0x48, 0x39, 0x01 };  /* add rcx, 16; cmp [rcx], rax */
  static const guint8 restore_gpr[] = { 0x5a, 0x59 };                             /* pop rdx; pop rcx */
  /* found: mov rax, [rcx+8]; mov [rsp+32], rax (the target slot) */
  static const guint8 found[] = { 0x48, 0x8b, 0x41, 0x08, 0x48, 0x89, 0x44, 0x24, 0x20 };
  Code c = { {0}, 0 };
  guint hits[4];
  put_all (&c, enter, sizeof (enter));
  put_all (&c, flags_save, sizeof (flags_save));
  put_all (&c, load, sizeof (load));
  put_all (&c, hash, sizeof (hash));
  put4 (&c, (1u << BUCKET_BITS) - 1);
  put_all (&c, scale, sizeof (scale));
  put8 (&c, params.table);
  put_all (&c, probe, sizeof (probe));
  hits[0] = je32 (&c);
  for (int w = 1; w < 4; w++)
  {
    put_all (&c, next_probe, sizeof (next_probe));
    hits[w] = je32 (&c);
  }
  /* not found: restore everything and fall through into Stalker's own handling of the ret */
  put_all (&c, restore_gpr, sizeof (restore_gpr));
  put_all (&c, flags_restore, sizeof (flags_restore));
  put1 (&c, 0x58);                                                           /* pop rax */
  put1 (&c, 0x48); put1 (&c, 0x8d); put1 (&c, 0xa4); put1 (&c, 0x24); put4 (&c, 136);  /* lea rsp, [rsp+136] */
  put1 (&c, 0xe9); put4 (&c, 0);                                             /* jmp over the found path */
  guint skip = c.n;
  for (int w = 0; w < 4; w++)
    land (&c, hits[w]);
  put_all (&c, found, sizeof (found));
  put_all (&c, restore_gpr, sizeof (restore_gpr));
  put_all (&c, flags_restore, sizeof (flags_restore));
  put1 (&c, 0x58);                                                           /* pop rax */
  /* ret imm16: pops the compiled address from the target slot, then drops the red zone gap and
     the program's own return address (and its ret's imm16): rsp ends where the ret leaves it */
  guint16 drop = (guint16) (128 + release);
  put1 (&c, 0xc2); put1 (&c, (guint8) drop); put1 (&c, (guint8) (drop >> 8));
  land (&c, skip);
  gum_x86_writer_put_bytes (cw, c.b, c.n);
  params.fast_returns++;
}

/* Stalker's slabs, kept within one window per context (see "Slabs" above). */
#define PAGE 4096ull
#define WINDOW_STEP (4ull << 20)  /* Stalker's slab size: windows are cut into chunks of it */
#define CHUNKS 448                /* a window: 1.75 GiB, under 2 GiB with room for the largest slab */
#define REACH 480                 /* chunks either side of a context a window may reach (1.875 GiB) */
#define MAX_WINDOWS 16
#define PROT_RWX 7
#define MAP_PRIVATE_ 0x2
#define MAP_FIXED_ 0x10
#define MAP_ANONYMOUS_ 0x20
#define MAP_NORESERVE_ 0x4000
#define MAP_FIXED_NOREPLACE_ 0x100000

extern long syscall (long number, ...);

/* `free`: one bit per chunk reserved (PROT_NONE) and not handed out yet; `held` counts them. */
typedef struct { guint64 lo, hi, ctx, held; guint64 free[CHUNKS / 64]; } Window;
/* In memory the script allocates: a CModule cannot write its own static data. */
typedef struct { GumSpinlock lock; guint64 n; Window w[MAX_WINDOWS]; } Windows;
extern Windows windows;

/* A mapping of `size` at exactly `at`, or 0 when something is there already. */
static guint64
map_at (guint64 at, guint64 size, long prot, long flags)
{
  long got = syscall (9, at, size, prot, flags | MAP_FIXED_NOREPLACE_, -1L, 0L);
  if (got == -1)
    return 0;
  if ((guint64) got != at)
  {
    syscall (11, got, size);  /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
    return 0;
  }
  return at;
}

static gboolean
hold (guint64 at)
{
  return map_at (at, WINDOW_STEP, 0, MAP_PRIVATE_ | MAP_ANONYMOUS_ | MAP_NORESERVE_) != 0;
}

/* Whether `address` lies in a mapping (msync fails with ENOMEM on an unmapped page). */
static gboolean
is_mapped (guint64 address)
{
  return syscall (26, address & ~(PAGE - 1), PAGE, 1L) == 0;
}

/* A window for the context at `ctx`: every free chunk within REACH of it is reserved, the span
   of CHUNKS holding the most (nearest centered on the context among equals) is kept, the rest
   given back. Reserved at once: libraries loaded later would take the space otherwise. */
static void
open_window (Window * w, guint64 ctx)
{
  guint8 got[2 * REACH + 1];
  guint64 base = (ctx & ~(WINDOW_STEP - 1)) - REACH * WINDOW_STEP;
  for (guint64 j = 0; j <= 2 * REACH; j++)
    got[j] = hold (base + j * WINDOW_STEP);
  guint64 count = 0, best = 0, best_at = REACH - CHUNKS / 2;
  for (guint64 j = 0; j < CHUNKS; j++)
    count += got[j];
  for (guint64 s = 0; s + CHUNKS <= 2 * REACH + 1; s++)
  {
    if (s > 0)
      count += got[s + CHUNKS - 1] - got[s - 1];
    guint64 off = s > REACH - CHUNKS / 2 ? s - (REACH - CHUNKS / 2) : (REACH - CHUNKS / 2) - s;
    guint64 best_off = best_at > REACH - CHUNKS / 2 ? best_at - (REACH - CHUNKS / 2) : (REACH - CHUNKS / 2) - best_at;
    if (count > best || (count == best && off < best_off))
    {
      best = count;
      best_at = s;
    }
  }
  w->lo = base + best_at * WINDOW_STEP;
  w->hi = w->lo + CHUNKS * WINDOW_STEP;
  w->ctx = ctx;
  w->held = 0;
  for (guint64 j = 0; j <= 2 * REACH; j++)
  {
    if (!got[j])
      continue;
    if (j >= best_at && j < best_at + CHUNKS)
    {
      w->free[(j - best_at) / 64] |= 1ull << ((j - best_at) % 64);
      w->held++;
    }
    else
      syscall (11, base + j * WINDOW_STEP, WINDOW_STEP);
  }
}

/* The reserved chunk nearest the context for a request of `size` (at most a chunk), the rest of
   the chunk given back; 0 when the window has none left (chunks freed since are held anew). */
static guint64
take (Window * w, guint64 size)
{
  if (size > WINDOW_STEP)
    return 0;
  if (w->held == 0)
    for (guint64 i = 0; i < CHUNKS; i++)
      if (hold (w->lo + i * WINDOW_STEP))
      {
        w->free[i / 64] |= 1ull << (i % 64);
        w->held++;
      }
  gint64 c = ((gint64) w->ctx - (gint64) w->lo) / (gint64) WINDOW_STEP;
  c = c < 0 ? 0 : (c >= CHUNKS ? CHUNKS - 1 : c);
  for (gint64 k = 0; k < 2 * CHUNKS; k++)
  {
    gint64 i = (k & 1) ? c - (k + 1) / 2 : c + k / 2;
    if (i < 0 || i >= CHUNKS || !((w->free[i / 64] >> (i % 64)) & 1))
      continue;
    w->free[i / 64] &= ~(1ull << (i % 64));
    w->held--;
    guint64 at = w->lo + (guint64) i * WINDOW_STEP;
    if (size < WINDOW_STEP)
      syscall (11, at + size, WINDOW_STEP - size);
    return at;
  }
  return 0;
}

/* Interceptor's onEnter on libc's mmap, on every thread. Stalker asks for its slabs near its
   context (code) or near its latest code slab (data), as anonymous mappings with that hint: the
   first executable one asked near a mapped address no window knows opens a window for it. */
void
on_mmap (GumInvocationContext * ic)
{
  guint64 hint = (guint64) gum_invocation_context_get_nth_argument (ic, 0);
  guint64 size = ((guint64) gum_invocation_context_get_nth_argument (ic, 1) + PAGE - 1) & ~(PAGE - 1);
  long prot = (long) (guint32) (gsize) gum_invocation_context_get_nth_argument (ic, 2);
  long flags = (long) (guint32) (gsize) gum_invocation_context_get_nth_argument (ic, 3);
  guint64 from = (guint64) gum_invocation_context_get_return_address (ic);
  if (hint == 0 || (flags & (MAP_ANONYMOUS_ | MAP_FIXED_ | MAP_FIXED_NOREPLACE_)) != MAP_ANONYMOUS_)
    return;
  if (from >= params.lo && from < params.hi)
    return;  /* the followed modules' own: placeGeneratedCode's to place */
  Window * w = NULL;
  guint64 at = 0;
  gum_spinlock_acquire (&windows.lock);
  for (guint64 i = 0; i < windows.n && w == NULL; i++)
  {
    Window * x = &windows.w[i];
    if ((hint >= x->lo && hint < x->hi) || (hint >= x->ctx && hint < x->ctx + WINDOW_STEP))
      w = x;
  }
  if (w == NULL && prot == PROT_RWX && windows.n < MAX_WINDOWS && hint > REACH * WINDOW_STEP &&
      is_mapped (hint))
  {
    w = &windows.w[windows.n++];
    open_window (w, hint);
  }
  if (w != NULL)
    at = take (w, size);
  gum_spinlock_release (&windows.lock);
  if (at != 0)
  {
    /* the call maps the place over the reservation (MAP_FIXED) */
    gum_invocation_context_replace_nth_argument (ic, 0, (gpointer) at);
    gum_invocation_context_replace_nth_argument (ic, 3, (gpointer) (gsize) (flags | MAP_FIXED_));
    params.slabs_near++;
  }
  else if (w != NULL)
    params.slabs_far++;  /* a full window: Stalker places it, possibly too far */
}

void
transform (GumStalkerIterator * iterator, GumStalkerOutput * output, gpointer user_data)
{
  const cs_insn * insn;
  gboolean first = TRUE;
  gboolean measuring = user_data != NULL;
  while (gum_stalker_iterator_next (iterator, &insn))
  {
    GumX86Writer * cw = output->writer.x86;
    if (first && measuring)
    {
      remember (insn->address, cw->pc);
      if (insn->address >= params.lo && insn->address < params.hi)
      {
        gint64 slot = slot_of (insn->address - params.base);
        if (slot >= 0)
        {
          emit_bump (cw, params.map + (guint64) slot);
          params.blocks++;
        }
        else
          params.outside++;
      }
    }
    first = FALSE;
    if (measuring && insn->id == X86_INS_RET)
    {
      gint release = ret_release (insn);
      if (release > 0 && release <= 0xffff - 128)
        emit_fast_return (cw, release);
    }
    gum_stalker_iterator_keep (iterator);
    /* In both modes: the module's CPU checks may run on either thread. */
    if (params.clear_avx512 && insn->id == X86_INS_XGETBV)
      emit_clear_avx512 (cw);
  }
}
""".replace("@BUCKET_BITS@", str(BUCKET_BITS))

AGENT_JS = r"""
'use strict';
const SOURCE = %s;
const TABLE_BYTES = %d;
const WINDOWS_BYTES = 16 + 88 * 16;  // struct Windows: a lock, a count, 16 windows of 88 bytes
const FRESH_CODE_BASE = '%s';
let cm = null;
let params = null;
let table = null;  // held here: memory from Memory.alloc is freed with its last JS reference
let windows = null;  // on_mmap's windows, held likewise
let importTid = 0;
let tid = 0;

function fill(p) {
  const names = ['base', 'lo', 'hi', 'map', 'n', 'start', 'length', 'slot_base', 'slot_mask', 'clear_avx512'];
  names.forEach((name, k) => params.add(8 * k).writeU64(uint64(String(p[name]))));
}

const PAGE = 4096;
const MAP_ANONYMOUS = 0x20;
let fresh = ptr(FRESH_CODE_BASE);
let placed = 0;

// Code generated at run time (TVM's LLVM JIT) lives in anonymous memory the followed modules map,
// and a mapping freed is soon handed out again: the next function's code lands where the last one
// was, and Stalker, trusting blocks once compiled, would run the old translation there. So every
// anonymous mapping those modules ask for without an address gets one never used before (a
// hint, ever upwards from FRESH_CODE_BASE, one guard page apart): new code, new addresses.
function placeGeneratedCode(lo, hi) {
  Interceptor.attach(Module.getGlobalExportByName('mmap'), {
    onEnter(args) {
      const from = this.returnAddress;
      if (!args[0].isNull() || (args[3].toInt32() & MAP_ANONYMOUS) === 0 || from.compare(lo) < 0 ||
          from.compare(hi) >= 0)
        return;
      const size = args[1].add(PAGE - 1).and(ptr(PAGE - 1).not());
      args[0] = fresh;
      fresh = fresh.add(size).add(PAGE);
      placed++;
    },
  });
}

rpc.exports = {
  init(p) {
    params = Memory.alloc(16 * 8);
    table = Memory.alloc(TABLE_BYTES);
    params.add(96).writePointer(table);
    fill(p);
    windows = Memory.alloc(WINDOWS_BYTES);
    windows.writeByteArray(new Array(WINDOWS_BYTES).fill(0));
    cm = new CModule(SOURCE, { params, windows, syscall: Module.getGlobalExportByName('syscall') });
    new NativeFunction(cm.clear_table, 'void', [])();
    // Trusted from the first run: blocks are linked to each other at once instead of after a
    // second pass through Stalker. Nothing followed rewrites its own code (see the README for
    // backends that generate code).
    Stalker.trustThreshold = 0;
    // Before the first follow, so that every slab of every context is placed (see on_mmap).
    Interceptor.attach(Module.getGlobalExportByName('mmap'), { onEnter: cm.on_mmap });
    importTid = p.tid;
    Stalker.follow(importTid, { transform: cm.transform, data: ptr(0) });
    return Process.arch;
  },
  locate(p) {
    fill(p);
    Stalker.unfollow(importTid);
    // Ranges run natively (code linked in from other projects): calls into them are not followed.
    (p.exclude || []).forEach(([base, size]) => Stalker.exclude({ base: ptr(base), size: Number(size) }));
    tid = p.tid;
    placeGeneratedCode(ptr(String(p.lo)), ptr(String(p.hi)));
    Stalker.follow(tid, { transform: cm.transform, data: ptr(1) });
  },
  stats() {
    const read = (k) => params.add(8 * k).readU64().toNumber();
    return {
      blocks: read(10), outside: read(11), fast_returns: read(13), placed,
      slabs_near: read(14), slabs_far: read(15),
    };
  },
  stop() {
    if (tid) {
      Stalker.unfollow(tid);
      Stalker.flush();
      tid = 0;
    }
  },
};
"""


def agent_source() -> str:
    """The script text, with the C source embedded as a JS string literal."""
    import json

    return AGENT_JS % (json.dumps(TRANSFORM_C), 64 << BUCKET_BITS, hex(FRESH_CODE_BASE))
