// kernels.cl: every AMD kernel family. build_amd.sh compiles this file once
// per catalog instance (INSTANCES) with NAME (the kernel symbol),
// FAMILY_<NAME> and, for typed families, WTYPE and VTYPE (the weight type
// and its activation partner, ggml ids) defined.
//
// Arguments (package amd's doc): the catalog ABI's buffers, then its push
// constants, then its specialization slots, F32 slots as u32 bits. The grid
// is the packet stream's, in workgroups of WG threads: one per row unless
// the family is sized by an attribute (passes/lower.go's gridAttr).
// Each family body names the T-CPU function (kernels/cpu) it follows.
#include "deq.h"

#ifdef WTYPE
// Activation rounding. T-CPU quantizes a matrix product's activations to
// the weight type's vec-dot partner VTYPE and multiplies exactly; here the
// rounded activation of element i is computed in the dot product itself,
// per block, as round_x in kernels/cuda/common.cuh does: Q8_0/Q8_1 blocks
// of 32 scaled by amax/127 (F16), Q8_K blocks of 256 scaled by the first
// largest-magnitude element's -127/max, F16 by rounding.

// dot_row returns, in every thread of the workgroup, the dot product of a
// weight row w (k elements of WTYPE) with the activations x rounded as
// VTYPE. part is NWAVES words of LDS.
static float dot_row(ROW w, __global const float* x, u32 k, __local float* part) {
    float acc = 0.f;
#if VTYPE == T_F32 || VTYPE == T_F16
    for (u32 i = TID(); i < k; i += WG) {
        float v = x[i];
#if VTYPE == T_F16
        v = round_f16(v);
#endif
        acc += DEQ(w, i) * v;
    }
#elif VTYPE == T_Q8_0 || VTYPE == T_Q8_1
    // wave per block of 32, a lane per element
    for (u32 b = WAVE_ID(); b < k / 32; b += NWAVES) {
        u32 i = 32 * b + LANE();
        float v = x[i];
        float amax = wave_max(__builtin_fabsf(v));
        float id = amax != 0.f ? 127.f / amax : 0.f;
        float xs = __builtin_rintf(v * id) * round_f16(amax / 127.f);
        acc += DEQ(w, i) * xs;
    }
#elif VTYPE == T_Q8_K
    // wave per block of 256, eight elements a lane
    for (u32 b = WAVE_ID(); b < k / 256; b += NWAVES) {
        float v[8], amax = 0.f;
        int at = 1 << 30;
        for (int t = 0; t < 8; t++) {
            int idx = LANE() + 32 * t;
            v[t] = x[256 * b + idx];
            float a = __builtin_fabsf(v[t]);
            if (a > amax) amax = a, at = idx;
        }
        // the first element (lowest index) of largest magnitude wins
        for (int o = WAVE / 2; o > 0; o >>= 1) {
            float a2 = shfl_xor_f(amax, o);
            int at2 = shfl_xor_i(at, o);
            if (a2 > amax || (a2 == amax && at2 < at)) amax = a2, at = at2;
        }
        if (amax == 0.f) continue;
        float iscale = -127.f / x[256 * b + at], d = 1.f / iscale;
        for (int t = 0; t < 8; t++) {
            float xs = d * __builtin_fminf(127.f, __builtin_rintf(iscale * v[t]));
            acc += DEQ(w, 256 * b + LANE() + 32 * t) * xs;
        }
    }
#else
#error "kernels.cl: no activation rounding for VTYPE"
#endif
    return wg_sum(acc, part);
}
#endif

#ifdef FAMILY_EMBED // embed: each row's token's table row, decoded (cpu.embed); grid rows
KERNEL void NAME(__global const u8* table, __global const u32* io, __global float* y, u32 cols) {
    int row = GROUP();
    if (row >= (int)io[IO_ROWS]) return;
    ROW t = table + io_row(io, row, ROW_TOKEN) * row_bytes(cols);
    for (u32 i = TID(); i < cols; i += WG) y[(u64)row * cols + i] = DEQ(t, i);
}
#endif

#ifdef FAMILY_RMS_NORM // rms_norm: each group of cols normalized (cpu.rmsNorm, normRow); grid rows
KERNEL void NAME(__global const float* x, __global const float* w, __global const u32* io, __global float* y,
    u32 cols, u32 group, u32 eps_bits) {
    __local double part[NWAVES];
    int row = GROUP();
    if (row >= (int)io[IO_ROWS]) return;
    float eps = as_float(eps_bits);
    for (u32 g = 0; g < cols / group; g++) {
        __global const float* xs = x + (u64)row * cols + (u64)g * group;
        __global float* ys = y + (u64)row * cols + (u64)g * group;
        double s = 0.0;
        for (u32 i = TID(); i < group; i += WG) s += (double)(xs[i] * xs[i]);
        s = wg_sum_d(s, part);
        float scale = 1.f / __builtin_sqrtf((float)(s / (double)group) + eps);
        for (u32 i = TID(); i < group; i += WG) ys[i] = (xs[i] * scale) * w[i];
        wg_barrier(); // y may alias x
    }
}
#endif

#if defined(FAMILY_MATMUL) || defined(FAMILY_MATMUL_RESIDUAL)
// matmul: y[r][j] = W_j·x[r] (+ bias[j]) (cpu.matmul); matmul_residual:
// the same added into y (cpu.matmulResidual). Grid n: workgroup j is
// output feature j for every active row.
KERNEL void NAME(__global const float* x, __global const u8* w, __global const float* bias, __global const u32* io,
    __global float* y, u32 k, u32 n) {
    __local float part[NWAVES];
    u32 j = GROUP(), rows = io[IO_ROWS];
    ROW wj = w + j * row_bytes(k);
    for (u32 r = 0; r < rows; r++) {
        float d = dot_row(wj, x + (u64)r * k, k, part);
        if (bias) d += bias[j];
        if (TID() == 0) {
#ifdef FAMILY_MATMUL_RESIDUAL
            y[(u64)r * n + j] += d;
#else
            y[(u64)r * n + j] = d;
#endif
        }
    }
}
#endif

#ifdef FAMILY_LM_HEAD // lm_head: logits of each row that wants them, in its slot's row (cpu.lmHead); grid n_vocab
KERNEL void NAME(__global const float* x, __global const u8* w, __global const u32* io, __global float* logits,
    u32 k, u32 n_vocab) {
    __local float part[NWAVES];
    u32 j = GROUP(), rows = io[IO_ROWS];
    ROW wj = w + j * row_bytes(k);
    for (u32 r = 0; r < rows; r++) {
        if (!(io_row(io, r, ROW_FLAGS) & ROW_WANTS_LOGITS)) continue;
        float d = dot_row(wj, x + (u64)r * k, k, part);
        if (TID() == 0) logits[(u64)io_row(io, r, ROW_SLOT) * n_vocab + j] = d;
    }
}
#endif

#ifdef FAMILY_MOE_GATE_TOPK
// moe_gate_topk (cpu.moeGateTopK): grid n_expert; workgroup g routes rows
// g, g+n_expert, …: the row's router logits (+ bias) into LDS, then one
// thread takes the softmax (gating 0), picks the n_used largest (the
// lowest index first among equals, as the oracle's stable sort) and
// weighs them. At most MOE_MAX_EXPERT experts.
#define MOE_MAX_EXPERT 512
KERNEL void NAME(__global const float* x, __global const u8* w, __global const float* bias, __global const u32* io,
    __global u32* route, u32 k, u32 n_expert, u32 n_used, u32 norm, u32 gating) {
    __local float part[NWAVES];
    __local float l[MOE_MAX_EXPERT];
    __local float ws[MOE_MAX_EXPERT];
    __local uchar taken[MOE_MAX_EXPERT];
    u32 rows = io[IO_ROWS];
    if (n_expert > MOE_MAX_EXPERT || n_used > n_expert) return;
    for (u32 r = GROUP(); r < rows; r += n_expert) {
        for (u32 e = 0; e < n_expert; e++) {
            float d = dot_row(w + e * row_bytes(k), x + (u64)r * k, k, part);
            if (TID() == 0) l[e] = bias ? d + bias[e] : d;
        }
        for (u32 e = TID(); e < n_expert; e += WG) taken[e] = 0;
        wg_barrier();
        if (TID() == 0) {
            if (gating == 0) { // softmax: cpu.softmax
                float mx = l[0];
                for (u32 e = 1; e < n_expert; e++) mx = __builtin_fmaxf(mx, l[e]);
                double sum = 0.0;
                for (u32 e = 0; e < n_expert; e++) l[e] = exp_f(l[e] - mx), sum += (double)l[e];
                float inv = (float)(1.0 / sum);
                for (u32 e = 0; e < n_expert; e++) l[e] *= inv;
            }
            __global u32* sel = route + 2 * (u64)r * n_used;
            for (u32 u = 0; u < n_used; u++) {
                int best = -1;
                for (u32 e = 0; e < n_expert; e++)
                    if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
                taken[best] = 1;
                sel[2 * u] = best;
                ws[u] = l[best];
            }
            if (gating != 0) {
                float mx = ws[0];
                for (u32 u = 1; u < n_used; u++) mx = __builtin_fmaxf(mx, ws[u]);
                double sum = 0.0;
                for (u32 u = 0; u < n_used; u++) ws[u] = exp_f(ws[u] - mx), sum += (double)ws[u];
                float inv = (float)(1.0 / sum);
                for (u32 u = 0; u < n_used; u++) ws[u] *= inv;
            } else if (norm) {
                float total = 0.f;
                for (u32 u = 0; u < n_used; u++) total += ws[u];
                for (u32 u = 0; u < n_used; u++) ws[u] /= total;
            }
            for (u32 u = 0; u < n_used; u++) sel[2 * u + 1] = as_uint(ws[u]);
        }
        wg_barrier();
    }
}
#endif

#ifdef FAMILY_MOE_GATE_UP
// moe_gate_up (cpu.moeGateUp): grid f; workgroup j computes feature j of
// the gate and up projections of every active row's every routed expert.
KERNEL void NAME(__global const float* x, __global const u8* w_gate, __global const u8* w_up, __global const u32* route,
    __global const u32* io, __global float* gate, __global float* up, u32 k, u32 f, u32 n_used) {
    __local float part[NWAVES];
    u32 j = GROUP(), rows = io[IO_ROWS];
    for (u32 r = 0; r < rows; r++) {
        for (u32 u = 0; u < n_used; u++) {
            u64 item = ((u64)r * n_used + u) * f + j;
            u64 wrow = ((u64)route[2 * (r * n_used + u)] * f + j) * row_bytes(k);
            float g = dot_row(w_gate + wrow, x + (u64)r * k, k, part);
            float v = dot_row(w_up + wrow, x + (u64)r * k, k, part);
            if (TID() == 0) gate[item] = g, up[item] = v;
        }
    }
}
#endif

#ifdef FAMILY_MOE_DOWN_ACC
// moe_down_acc (cpu.moeDownAcc): grid n; workgroup j adds to y[r][j] the
// routed experts' outputs for feature j, each weighted after its bias.
KERNEL void NAME(__global const float* h, __global const u8* w, __global const float* bias, __global const u32* route,
    __global const u32* io, __global float* y, u32 f, u32 n, u32 n_used) {
    __local float part[NWAVES];
    u32 j = GROUP(), rows = io[IO_ROWS];
    for (u32 r = 0; r < rows; r++) {
        float sum = 0.f;
        for (u32 u = 0; u < n_used; u++) {
            u32 e = route[2 * (r * n_used + u)];
            float wt = as_float(route[2 * (r * n_used + u) + 1]);
            float d = dot_row(w + ((u64)e * n + j) * row_bytes(f), h + ((u64)r * n_used + u) * f, f, part);
            if (bias) d += bias[(u64)e * n + j];
            sum += wt * d;
        }
        if (TID() == 0) y[(u64)r * n + j] += sum;
    }
}
#endif

#ifdef FAMILY_ROPE
// rope (cpu.rope, ropeSpec.table and rotate): grid rows; the workgroup
// builds the row's (cos, sin) table in LDS, θ by repeated float
// multiplication as the oracle does, then rotates every head's pairs.
#define ROPE_MAX_PAIRS 256
KERNEL void NAME(__global float* x, __global const u32* io, u32 n_head, u32 head_dim, u32 n_rot, u32 neox,
    u32 base_bits, u32 scale_bits) {
    __local float cs[ROPE_MAX_PAIRS], sn[ROPE_MAX_PAIRS];
    int row = GROUP();
    u32 pairs = n_rot / 2;
    if (row >= (int)io[IO_ROWS] || pairs > ROPE_MAX_PAIRS) return;
    float base = as_float(base_bits), fscale = as_float(scale_bits);
    // ropeParams: base^(-2/n_rot) rounded to float
    float theta_scale = __builtin_exp2f(__builtin_log2f(base) * (-2.f / (float)n_rot));
    u32 pos = io_row(io, row, ROW_POS);
    for (u32 p = TID(); p < pairs; p += WG) {
        float theta = (float)pos;
        for (u32 q = 0; q < p; q++) theta *= theta_scale;
        sin_cos(fscale * theta, &cs[p], &sn[p]);
    }
    wg_barrier();
    for (u32 it = TID(); it < n_head * pairs; it += WG) {
        u32 hd = it / pairs, p = it % pairs;
        __global float* v = x + ((u64)row * n_head + hd) * head_dim;
        u32 i0 = neox ? p : 2 * p, i1 = neox ? p + pairs : 2 * p + 1;
        float x0 = v[i0], x1 = v[i1], c = cs[p], s = sn[p];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x0 * s + x1 * c;
    }
}
#endif

#ifdef FAMILY_KV_WRITE // kv_write: each row's K and V into its slot's page as F16 (cpu.kvWrite); grid rows
KERNEL void NAME(__global const float* k, __global const float* v, __global const u32* io, __global u8* kv,
    u32 layer, u32 kv_dim, u32 n_layer) {
    int row = GROUP();
    if (row >= (int)io[IO_ROWS]) return;
    u32 slot = io_row(io, row, ROW_SLOT), pos = io_row(io, row, ROW_POS);
    u32 page = io_page(io, slot, pos);
    __global half* dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS);
    __global half* dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS);
    for (u32 j = TID(); j < kv_dim; j += WG) {
        dk[j] = (half)k[(u64)row * kv_dim + j];
        dv[j] = (half)v[(u64)row * kv_dim + j];
    }
}
#endif

#ifdef FAMILY_FLASH_ATTN
// flash_attn (cpu's flash attention): grid rows; the workgroup takes the
// row's heads in turn. Per head, keys 0..pos of the row's slot go by in
// chunks of WG, a thread scoring one key against the query (in LDS; F16-
// rounded when the step has fewer than 64 rows, as the oracle does); the
// chunk updates the online softmax (running max m, sum l) and each of the
// first head_dim threads its output dimension's accumulator. F32
// throughout. head_dim ≤ WG.
KERNEL void NAME(__global const float* q, __global const u8* kv, __global const u32* io, __global float* y, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    __local float part[NWAVES];
    __local float qs[WG], p[WG];
    __local u32 prow[WG]; // each chunk key's K row offset within its page, in halves
    int row = GROUP(), tid = TID();
    u32 rows = io[IO_ROWS];
    if (row >= (int)rows || head_dim > WG) return;
    float scale = as_float(scale_bits);
    u32 pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    u32 kv_dim = n_head_kv * head_dim;
    u64 page_halves = (u64)n_layer * 2 * KV_PAGE_TOKENS * kv_dim;
    __global const half* cache = (__global const half*)kv;
    for (u32 h = 0; h < n_head; h++) {
        u32 kvh = h / (n_head / n_head_kv);
        __global const float* qr = q + ((u64)row * n_head + h) * head_dim;
        if (tid < (int)head_dim) qs[tid] = rows < 64 ? round_f16(qr[tid]) : qr[tid];
        wg_barrier();
        float m = -INF, l = 0.f, acc = 0.f;
        for (u32 t0 = 0; t0 <= pos; t0 += WG) {
            u32 t = t0 + tid;
            float s = -INF;
            if (t <= pos) {
                u32 in_page = ((layer * 2) * KV_PAGE_TOKENS + t % KV_PAGE_TOKENS) * kv_dim + kvh * head_dim;
                prow[tid] = in_page;
                __global const half* kr = cache + io_page(io, slot, t) * page_halves + in_page;
                float d = 0.f;
                for (u32 i = 0; i < head_dim; i++) d += qs[i] * (float)kr[i];
                s = d * scale;
            }
            float mn = __builtin_fmaxf(m, wg_max(s, part));
            float e = t <= pos ? exp_f(s - mn) : 0.f;
            p[tid] = e;
            float cl = wg_sum(e, part); // its barriers publish p and prow
            float fm = m == -INF ? 0.f : exp_f(m - mn);
            l = l * fm + cl;
            if (tid < (int)head_dim) {
                float a = 0.f;
                u32 nk = pos + 1 - t0 < WG ? pos + 1 - t0 : WG;
                for (u32 jj = 0; jj < nk; jj++) {
                    u32 tk = t0 + jj;
                    __global const half* vr =
                        cache + io_page(io, slot, tk) * page_halves + prow[jj] + (u64)KV_PAGE_TOKENS * kv_dim;
                    a += p[jj] * (float)vr[tid];
                }
                acc = acc * fm + a;
            }
            m = mn;
            wg_barrier(); // p and prow are reused
        }
        if (tid < (int)head_dim) y[((u64)row * n_head + h) * head_dim + tid] = l != 0.f ? acc / l : 0.f;
        wg_barrier(); // qs is reused
    }
}
#endif

#ifdef FAMILY_ADD // add: x += y over the active rows (cpu.add); grid rows
KERNEL void NAME(__global float* x, __global const float* y, __global const u32* io, u32 cols) {
    int row = GROUP();
    if (row >= (int)io[IO_ROWS]) return;
    for (u32 i = TID(); i < cols; i += WG) x[(u64)row * cols + i] += y[(u64)row * cols + i];
}
#endif

#ifdef FAMILY_SWIGLU // swiglu: y = silu(gate)·up (cpu.swiglu); grid rows
KERNEL void NAME(__global const float* gate, __global const float* up, __global const u32* io, __global float* y,
    u32 cols) {
    int row = GROUP();
    if (row >= (int)io[IO_ROWS]) return;
    for (u32 i = TID(); i < cols; i += WG) {
        u64 at = (u64)row * cols + i;
        y[at] = silu_f(gate[at]) * up[at];
    }
}
#endif

#ifdef FAMILY_ARGMAX
// argmax: tokens[slot] = the first largest logit of each row that wants
// logits (cpu.argmax); grid rows. Each thread keeps its first best; thread
// 0 merges them, lower index first among equals.
KERNEL void NAME(__global const float* logits, __global const u32* io, __global u32* tokens, u32 n_vocab) {
    __local float bv[WG];
    __local int bi[WG];
    int row = GROUP();
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    u32 slot = io_row(io, row, ROW_SLOT);
    __global const float* l = logits + (u64)slot * n_vocab;
    float best = -INF;
    int at = -1;
    for (u32 j = TID(); j < n_vocab; j += WG)
        if (at < 0 || l[j] > best) best = l[j], at = j;
    bv[TID()] = best, bi[TID()] = at;
    wg_barrier();
    if (TID() != 0) return;
    for (int t = 1; t < WG; t++)
        if (bi[t] >= 0 && (at < 0 || bv[t] > best || (bv[t] == best && bi[t] < at))) best = bv[t], at = bi[t];
    tokens[slot] = at;
}
#endif
