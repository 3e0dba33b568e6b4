"""The Frida agent the binary collector loads into a worker: a Stalker transform in C and its RPC.

The parent loads `AGENT_JS` into the worker and calls `init(params)` once. The agent
compiles `TRANSFORM_C` (Frida's built-in C compiler) and follows one thread, the
worker's measuring thread, for the worker's whole life: following anew per test would
recompile every block each time. At the head of every block inside the module the
transform writes a few instructions that bump the block's slot in a hit map the
*worker* owns (a numpy array it zeroes and reads itself), so a test costs no RPC.

    lea rsp, [rsp-128]      ; step over the red zone
    pushfq ; push rax
    mov rax, <map + slot>
    add byte [rax], 1 ; adc byte [rax], 0     ; saturate at 255 instead of wrapping to 0
    pop rax ; popfq
    lea rsp, [rsp+128]

With `clear_avx512` (hosts with AVX-512) the transform also clears bits 5-7 of EAX after
every XGETBV the followed thread runs, so the module (imported on that thread) believes
the OS keeps no AVX-512 state and picks its AVX2 kernels: Stalker's own context switch
does not preserve the upper halves of zmm registers, which corrupts results computed by
AVX-512 kernels.

params (all addresses as decimal strings, offsets are the module's ELF virtual addresses):
    {"tid": 4242, "base": "...", "lo": "...", "hi": "...", "map": "...", "n": 44186,
     "start": "...", "length": "...", "slot_base": "...", "slot_mask": "...", "clear_avx512": 0}
"""

from __future__ import annotations

TRANSFORM_C = r"""
#include <gum/gumstalker.h>

typedef struct {
  guint64 base, lo, hi, map, n, start, length, slot_base, slot_mask, clear_avx512;
  guint64 blocks, outside;
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

static void
emit_bump (GumX86Writer * cw, guint64 cell)
{
  static const guint8 bump[] = { 0x80, 0x00, 0x01, 0x80, 0x10, 0x00 };
  gum_x86_writer_put_lea_reg_reg_offset (cw, GUM_X86_RSP, GUM_X86_RSP, -128);
  gum_x86_writer_put_pushfx (cw);
  gum_x86_writer_put_push_reg (cw, GUM_X86_RAX);
  gum_x86_writer_put_mov_reg_u64 (cw, GUM_X86_RAX, cell);
  gum_x86_writer_put_bytes (cw, bump, sizeof (bump));
  gum_x86_writer_put_pop_reg (cw, GUM_X86_RAX);
  gum_x86_writer_put_popfx (cw);
  gum_x86_writer_put_lea_reg_reg_offset (cw, GUM_X86_RSP, GUM_X86_RSP, 128);
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

void
transform (GumStalkerIterator * iterator, GumStalkerOutput * output, gpointer user_data)
{
  const cs_insn * insn;
  gboolean first = TRUE;
  while (gum_stalker_iterator_next (iterator, &insn))
  {
    gboolean inside = insn->address >= params.lo && insn->address < params.hi;
    if (first)
    {
      first = FALSE;
      if (inside)
      {
        gint64 slot = slot_of (insn->address - params.base);
        if (slot >= 0)
        {
          emit_bump (output->writer.x86, params.map + (guint64) slot);
          params.blocks++;
        }
        else
          params.outside++;
      }
    }
    gum_stalker_iterator_keep (iterator);
    /* Not only inside the module: its CPU checks run while it loads, before `lo`/`hi` are known. */
    if (params.clear_avx512 && insn->id == X86_INS_XGETBV)
      emit_clear_avx512 (output->writer.x86);
  }
}
"""

AGENT_JS = r"""
'use strict';
const SOURCE = %s;
let cm = null;
let params = null;
let tid = 0;

function fill(p) {
  const names = ['base', 'lo', 'hi', 'map', 'n', 'start', 'length', 'slot_base', 'slot_mask', 'clear_avx512'];
  names.forEach((name, k) => params.add(8 * k).writeU64(uint64(String(p[name]))));
}

rpc.exports = {
  init(p) {
    params = Memory.alloc(12 * 8);
    fill(p);
    cm = new CModule(SOURCE, { params });
    tid = p.tid;
    Stalker.follow(tid, { transform: cm.transform });
    return Process.arch;
  },
  locate(p) {
    // Blocks compiled before the module's place was known carry no counters: follow
    // afresh so that every block is compiled again, this time with them.
    fill(p);
    Stalker.unfollow(tid);
    Stalker.flush();
    Stalker.garbageCollect();
    Stalker.follow(tid, { transform: cm.transform });
  },
  stats() {
    return { blocks: params.add(80).readU64().toNumber(), outside: params.add(88).readU64().toNumber() };
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

    return AGENT_JS % json.dumps(TRANSFORM_C)
