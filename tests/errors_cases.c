/* test_errors' table of bad cases: mutations of the valid problems (errors_fixture.c) that each
 * break exactly one thing, and what each call must then answer. */
#include "errors_fixture.h"
#include "common.h"

#include <math.h>
#include <stdint.h>

/* ---- mutations: each breaks exactly one thing ---------------------------------------------- */

#define MUT(fn, ...) static void fn(call *c) { __VA_ARGS__; }
static void idx_set(const gdn_tensor *t, int64_t i, int64_t v) { tensor_set(t, i, (double)v); }
static int32_t static_cu_b2[3] = {0, 5, 10}; /* a cu_seqlens for an equal-length B=2 batch */
static gdn_tensor static_cu(void) { return gdn_tensor_1d(static_cu_b2, GDN_I32, 3); }

/* generic */
MUT(m_null_ctx, c->ctx = NULL)
MUT(m_null_args, c->null_args = 1)
MUT(m_null_in, c->null_in = 1)
MUT(m_null_out, c->null_out = 1)
MUT(m_null_bytes, c->null_bytes = 1)

/* delta rule */
#define D c->dr
MUT(d_q_absent, D.q.data = NULL)
MUT(d_k_absent, D.k.data = NULL)
MUT(d_v_absent, D.v.data = NULL)
MUT(d_g_absent, D.g.data = NULL)
MUT(d_beta_absent, D.beta.data = NULL)
MUT(d_out_absent, D.out.data = NULL)
MUT(d_q_ndim3, D.q.ndim = 3)
MUT(d_k_ndim5, D.k.ndim = 5)
MUT(d_v_ndim0, D.v.ndim = 0)
MUT(d_q_H0, D.q.shape[2] = 0)
MUT(d_q_Tneg, D.q.shape[1] = -1)
MUT(d_k_H, D.k.shape[2] = 1)
MUT(d_k_K, D.k.shape[3] = 7)
MUT(d_k_T, D.k.shape[1] = 4)
MUT(d_v_B, D.v.shape[0] = 1)
MUT(d_v_T, D.v.shape[1] = 4)
MUT(d_v_HV3, D.v.shape[2] = 3)
MUT(d_v_V0, D.v.shape[3] = 0)
MUT(d_g_HV, D.g.shape[2] = 2)
MUT(d_g_T, D.g.shape[1] = 6)
MUT(d_g_ndim4, D.g.ndim = 4)
MUT(d_beta_B, D.beta.shape[0] = 1)
MUT(d_beta_HV, D.beta.shape[2] = 8)
MUT(d_out_V, D.out.shape[3] = 5)
MUT(d_out_HV, D.out.shape[2] = 2)
MUT(d_out_T, D.out.shape[1] = 4)
MUT(d_state_HV, D.state.shape[1] = 2)
MUT(d_state_dim2, D.state.shape[2] = 6)
MUT(d_state_dim3, D.state.shape[3] = 8)
MUT(d_state_vk_dim2, D.state.shape[2] = 8)
MUT(d_state_vk_dim3, D.state.shape[3] = 6)
MUT(d_state_HV8, D.state.shape[1] = 8)
MUT(d_state_ndim3, D.state.ndim = 3)
MUT(d_layout_vk, D.state_layout = GDN_STATE_VK)
MUT(d_layout_kv, D.state_layout = GDN_STATE_KV)
MUT(d_k_bf16, D.k.dtype = GDN_BF16)
MUT(d_v_f16, D.v.dtype = GDN_F16)
MUT(d_q_f32, D.q.dtype = GDN_F32)
MUT(d_q_i32, D.q.dtype = GDN_I32)
MUT(d_q_dtype99, D.q.dtype = (gdn_dtype)99)
MUT(d_g_u8, D.g.dtype = GDN_U8)
MUT(d_beta_i64, D.beta.dtype = GDN_I64)
MUT(d_out_i32, D.out.dtype = GDN_I32)
MUT(d_state_f16, D.state.dtype = GDN_F16)
MUT(d_slots_f32, D.state_slots.dtype = GDN_F32)
MUT(d_init_f32, D.has_initial_state.dtype = GDN_F32)
MUT(d_init_i64, D.has_initial_state.dtype = GDN_I64)
MUT(d_cu_f32, D.cu_seqlens.dtype = GDN_F32)
MUT(d_cu_u8, D.cu_seqlens.dtype = GDN_U8)
MUT(d_q_stride3, D.q.stride[3] = 2)
MUT(d_v_stride3_0, D.v.stride[3] = 0)
MUT(d_out_stride3, D.out.stride[3] = 2)
MUT(d_beta_stride2, D.beta.stride[2] = 2)
MUT(d_k_stride1_neg, D.k.stride[1] = -D.k.stride[1])
MUT(d_state_stride0_neg, D.state.stride[0] = -1)
MUT(d_slots_stride_neg, D.state_slots.stride[0] = -1)
MUT(d_cu_stride_neg, D.cu_seqlens.stride[0] = -1)
MUT(d_chunk48, D.chunk_size = 48)
MUT(d_chunk256, D.chunk_size = 256)
MUT(d_chunk_neg, D.chunk_size = -1)
MUT(d_algo7, D.algorithm = (gdn_algorithm)7)
MUT(d_precision3, D.precision = (gdn_precision)3)
MUT(d_gva5, D.gva = (gdn_gva)5)
MUT(d_layout3, D.state_layout = (gdn_state_layout)3)
MUT(d_layout_neg, D.state_layout = (gdn_state_layout)-1)
MUT(d_scale_nan, D.scale = NAN)
MUT(d_scale_inf, D.scale = INFINITY)
MUT(d_scale_ninf, D.scale = -INFINITY)
MUT(d_slot0_eq_S, idx_set(&D.state_slots, 0, 4))
MUT(d_slot1_big, idx_set(&D.state_slots, 1, 7))
MUT(d_slots_dup, idx_set(&D.state_slots, 0, 1); idx_set(&D.state_slots, 1, 1))
MUT(d_slots_dup2, idx_set(&D.state_slots, 1, 3))
MUT(d_slots_skip_all, idx_set(&D.state_slots, 0, -1); idx_set(&D.state_slots, 1, -1))
MUT(d_slots_len3, D.state_slots.shape[0] = 3)
MUT(d_slots_len1, D.state_slots.shape[0] = 1)
MUT(d_slots_ndim2, D.state_slots.ndim = 2)
MUT(d_slots_no_state, D.state.data = NULL)
MUT(d_init_no_state, D.state.data = NULL; D.state_slots.data = NULL)
MUT(d_init_len3, D.has_initial_state.shape[0] = 3)
MUT(d_init_len1, D.has_initial_state.shape[0] = 1)
MUT(d_pool_small, D.state_slots.data = NULL; D.state.shape[0] = 1)
MUT(d_cu_B2, D.cu_seqlens = static_cu())
MUT(d_cu0_1, idx_set(&D.cu_seqlens, 0, 1))
MUT(d_cu0_neg, idx_set(&D.cu_seqlens, 0, -1))
MUT(d_cu_decr, idx_set(&D.cu_seqlens, 1, 10))
MUT(d_cu_decr1, idx_set(&D.cu_seqlens, 1, -2))
MUT(d_cu_end_short, idx_set(&D.cu_seqlens, 2, 8))
MUT(d_cu_end_long, idx_set(&D.cu_seqlens, 2, 10))
MUT(d_cu_len1, D.cu_seqlens.shape[0] = 1)
MUT(d_cu_ndim2, D.cu_seqlens.ndim = 2; D.cu_seqlens.shape[1] = 1)
MUT(d_varlen_B2, D.q.shape[0] = 2; D.k.shape[0] = 2; D.v.shape[0] = 2; D.g.shape[0] = 2;
    D.beta.shape[0] = 2; D.out.shape[0] = 2)
MUT(d_out_alias_v_stride, D.out = D.v; D.out.stride[1] = 6)
MUT(d_out_alias_v_dtype, D.out = D.v; D.out.dtype = GDN_BF16)
MUT(d_out_alias_q_stride, D.out = D.q; D.out.shape[2] = 4; D.out.shape[3] = 6; D.out.stride[1] = 8)
MUT(d_out_is_v, D.out = D.v)
MUT(d_cu_len0, D.cu_seqlens.shape[0] = 0)
MUT(d_state_bcast, D.state.stride[0] = 0)
MUT(d_out_bcast, D.out.stride[0] = 0)
MUT(d_out_rows_overlap, D.out.stride[1] = 1)
MUT(d_slots_bcast, D.state_slots.stride[0] = 0)
MUT(d_q_misaligned, D.q.data = (char *)D.q.data + 2)
MUT(d_state_misaligned, D.state.data = (char *)D.state.data + 1)
MUT(d_state_on_out, D.state.data = D.out.data)
MUT(d_state_on_g, D.state.data = D.g.data)
MUT(d_out_on_beta, D.out.data = D.beta.data)
MUT(d_K_2p32, D.q.shape[3] = (int64_t)1 << 32; D.k.shape[3] = (int64_t)1 << 32)
MUT(d_V_huge, D.v.shape[3] = ((int64_t)1 << 59) + 1)
MUT(d_stride_wraps, D.v.stride[0] = INT64_MAX / 2)
MUT(d_out_overlaps_v, D.out = D.v; D.out.data = (float *)D.v.data + 3)
MUT(d_A_3, D.gating.A.shape[0] = 3)
MUT(d_A_absent, D.gating.A.data = NULL)
MUT(d_A_ndim2, D.gating.A.ndim = 2)
MUT(d_A_i32, D.gating.A.dtype = GDN_I32)
MUT(d_dtb_5, D.gating.dt_bias.shape[0] = 5)
MUT(d_aform4, D.gating.a_form = (gdn_a_form)4)
MUT(d_thr0, D.gating.softplus_threshold = 0.0f)
MUT(d_thr_neg, D.gating.softplus_threshold = -1.0f)
MUT(d_thr_nan, D.gating.softplus_threshold = NAN)
#undef D

/* conv1d (prefill) */
#define C c->conv
MUT(c_x_absent, C.x.data = NULL)
MUT(c_w_absent, C.weight.data = NULL)
MUT(c_out_absent, C.out.data = NULL)
MUT(c_x_ndim2, C.x.ndim = 2)
MUT(c_w_ndim1, C.weight.ndim = 1)
MUT(c_bias_ndim2, C.bias.ndim = 2)
MUT(c_x_C0, C.x.shape[2] = 0)
MUT(c_w_C, C.weight.shape[0] = 5)
MUT(c_w_W1, C.weight.shape[1] = 1)
MUT(c_w_W17, C.weight.shape[1] = 17)
MUT(c_w_W0, C.weight.shape[1] = 0)
MUT(c_bias_C, C.bias.shape[0] = 7)
MUT(c_out_T, C.out.shape[1] = 4)
MUT(c_out_B, C.out.shape[0] = 1)
MUT(c_out_ndim4, C.out.ndim = 4; C.out.shape[3] = 1)
MUT(c_st_W4, C.conv_state.shape[2] = 4)
MUT(c_st_W2, C.conv_state.shape[2] = 2)
MUT(c_st_C, C.conv_state.shape[1] = 5)
MUT(c_st_ndim2, C.conv_state.ndim = 2)
MUT(c_st_f16, C.conv_state.dtype = GDN_F16)
MUT(c_st_i32, C.conv_state.dtype = GDN_I32)
MUT(c_x_i64, C.x.dtype = GDN_I64)
MUT(c_w_u8, C.weight.dtype = GDN_U8)
MUT(c_bias_i32, C.bias.dtype = GDN_I32)
MUT(c_out_i32, C.out.dtype = GDN_I32)
MUT(c_slots_f32, C.state_slots.dtype = GDN_F32)
MUT(c_init_f32, C.has_initial_state.dtype = GDN_F32)
MUT(c_cu_f32, C.cu_seqlens.dtype = GDN_F32)
MUT(c_x_stride2, C.x.stride[2] = 2)
MUT(c_w_stride1, C.weight.stride[1] = 2)
MUT(c_out_stride2, C.out.stride[2] = 3)
MUT(c_x_stride0_neg, C.x.stride[0] = -30)
MUT(c_st_stride2_neg, C.conv_state.stride[2] = -1)
MUT(c_bias_stride_neg, C.bias.stride[0] = -1)
MUT(c_act9, C.activation = (gdn_activation)9)
MUT(c_act_neg, C.activation = (gdn_activation)-1)
MUT(c_slot0_eq_S, idx_set(&C.state_slots, 0, 4))
MUT(c_slot1_big, idx_set(&C.state_slots, 1, 9))
MUT(c_slots_dup, idx_set(&C.state_slots, 1, 2))
MUT(c_slots_skip_all, idx_set(&C.state_slots, 0, -1); idx_set(&C.state_slots, 1, -1))
MUT(c_slots_no_state, C.conv_state.data = NULL)
MUT(c_init_no_state, C.conv_state.data = NULL; C.state_slots.data = NULL)
MUT(c_init_len3, C.has_initial_state.shape[0] = 3)
MUT(c_init_len1, C.has_initial_state.shape[0] = 1)
MUT(c_slots_len3, C.state_slots.shape[0] = 3)
MUT(c_pool_small, C.state_slots.data = NULL; C.conv_state.shape[0] = 1)
MUT(c_cu_B2, C.cu_seqlens = static_cu())
MUT(c_cu0_1, idx_set(&C.cu_seqlens, 0, 1))
MUT(c_cu_decr, idx_set(&C.cu_seqlens, 1, 8))
MUT(c_cu_end, idx_set(&C.cu_seqlens, 2, 6))
MUT(c_cu_len1, C.cu_seqlens.shape[0] = 1)
MUT(c_varlen_B2, C.x.shape[0] = 2; C.out.shape[0] = 2)
MUT(c_out_alias_x_stride, C.out = C.x; C.out.stride[1] = 12)
MUT(c_out_alias_x_dtype, C.out = C.x; C.out.dtype = GDN_BF16)
MUT(c_out_overlaps_x, C.out = C.x; C.out.data = (char *)C.x.data + gdn_dtype_size(C.x.dtype))
#undef C

/* conv1d_update (decode) */
#define U c->upd
MUT(u_x_absent, U.x.data = NULL)
MUT(u_w_absent, U.weight.data = NULL)
MUT(u_out_absent, U.out.data = NULL)
MUT(u_st_absent, U.conv_state.data = NULL)
MUT(u_x_ndim3, U.x.ndim = 3)
MUT(u_x_C0, U.x.shape[1] = 0)
MUT(u_w_W1, U.weight.shape[1] = 1)
MUT(u_w_W17, U.weight.shape[1] = 17)
MUT(u_w_C, U.weight.shape[0] = 5)
MUT(u_out_N, U.out.shape[0] = 2)
MUT(u_st_W, U.conv_state.shape[2] = 4)
MUT(u_st_C, U.conv_state.shape[1] = 7)
MUT(u_st_f16, U.conv_state.dtype = GDN_F16)
MUT(u_slot2_eq_S, idx_set(&U.state_slots, 2, 4))
MUT(u_slots_dup, idx_set(&U.state_slots, 2, 1))
MUT(u_slots_len2, U.state_slots.shape[0] = 2)
MUT(u_slots_u8, U.state_slots.dtype = GDN_U8)
MUT(u_slots_skip_all, idx_set(&U.state_slots, 0, -1); idx_set(&U.state_slots, 2, -1))
MUT(u_pool_small, U.state_slots.data = NULL; U.conv_state.shape[0] = 2)
MUT(u_act9, U.activation = (gdn_activation)9)
MUT(u_x_stride1, U.x.stride[1] = 2)
MUT(u_out_alias_x_stride, U.out = U.x; U.out.stride[0] = 3)
#undef U

/* gating */
MUT(g_a_absent, c->a.data = NULL)
MUT(g_gout_absent, c->g_out.data = NULL)
MUT(g_b_without_beta_out, c->beta_out.data = NULL)
MUT(g_beta_out_without_b, c->b.data = NULL)
MUT(g_a_ndim5, c->a.ndim = 5)
MUT(g_a_ndim0, c->a.ndim = 0)
MUT(g_a_HV0, c->a.shape[2] = 0)
MUT(g_gout_T, c->g_out.shape[1] = 4)
MUT(g_gout_is_b, c->g_out = c->b)
MUT(g_beta_out_is_a, c->beta_out = c->a)
MUT(g_gout_ndim4, c->g_out.ndim = 4; c->g_out.shape[3] = 1)
MUT(g_b_HV, c->b.shape[2] = 3)
MUT(g_beta_out_B, c->beta_out.shape[0] = 1)
MUT(g_A_3, c->gp.A.shape[0] = 3)
MUT(g_A_absent, c->gp.A.data = NULL)
MUT(g_A_i64, c->gp.A.dtype = GDN_I64)
MUT(g_dtb_5, c->gp.dt_bias.shape[0] = 5)
MUT(g_aform4, c->gp.a_form = (gdn_a_form)4)
MUT(g_thr0, c->gp.softplus_threshold = 0.0f)
MUT(g_thr_neg, c->gp.softplus_threshold = -1.0f)
MUT(g_thr_inf, c->gp.softplus_threshold = INFINITY)
MUT(g_thr_nan, c->gp.softplus_threshold = NAN)
MUT(g_a_i32, c->a.dtype = GDN_I32)
MUT(g_beta_out_u8, c->beta_out.dtype = GDN_U8)
MUT(g_a_stride2, c->a.stride[2] = 2)
MUT(g_gout_stride0_neg, c->g_out.stride[0] = -1)
MUT(g_gout_alias_a_stride, c->g_out = c->a; c->g_out.stride[1] = 8)
MUT(g_gout_alias_a_dtype, c->g_out = c->a; c->g_out.dtype = GDN_BF16)
MUT(g_beta_out_alias_b_stride, c->beta_out = c->b; c->beta_out.stride[0] = 40)

/* l2norm */
MUT(l_x_absent, c->x.data = NULL)
MUT(l_x_ndim5, c->x.ndim = 5)
MUT(l_x_D0, c->x.shape[2] = 0)
MUT(l_out_D, c->out.shape[2] = 7)
MUT(l_out_ndim4, c->out.ndim = 4; c->out.shape[3] = 1)
MUT(l_x_u8, c->x.dtype = GDN_U8)
MUT(l_out_i32, c->out.dtype = GDN_I32)
MUT(l_out_stride2, c->out.stride[2] = 2)
MUT(l_x_stride1_neg, c->x.stride[1] = -8)
MUT(l_eps_neg, c->eps = -1.0f)
MUT(l_eps_nan, c->eps = NAN)
MUT(l_eps_inf, c->eps = INFINITY)
MUT(l_out_alias_x_stride, c->out = c->x; c->out.stride[0] = 48)
MUT(l_out_alias_x_dtype, c->out = c->x; c->out.dtype = GDN_F16)

/* rmsnorm_gated */
#define R c->rms
MUT(r_x_absent, R.x.data = NULL)
MUT(r_out_absent, R.out.data = NULL)
MUT(r_x_ndim5, R.x.ndim = 5)
MUT(r_x_D0, R.x.shape[2] = 0)
MUT(r_z_T, R.z.shape[1] = 3)
MUT(r_z_ndim4, R.z.ndim = 4; R.z.shape[3] = 1)
MUT(r_w_5, R.weight.shape[0] = 5)
MUT(r_w_ndim2, R.weight.ndim = 2)
MUT(r_out_D, R.out.shape[2] = 5)
MUT(r_z_i32, R.z.dtype = GDN_I32)
MUT(r_w_u8, R.weight.dtype = GDN_U8)
MUT(r_out_i64, R.out.dtype = GDN_I64)
MUT(r_z_stride2, R.z.stride[2] = 2)
MUT(r_w_stride_neg, R.weight.stride[0] = -1)
MUT(r_eps_neg, R.eps = -1e-6f)
MUT(r_eps_nan, R.eps = NAN)
MUT(r_out_alias_x_stride, R.out = R.x; R.out.stride[1] = 12)
MUT(r_out_alias_z_stride, R.out = R.z; R.out.stride[0] = 48)
#undef R

/* ---- the table ---------------------------------------------------------------------------- */

#define E_NULL GDN_ERR_NULL
#define E_DTYPE GDN_ERR_DTYPE
#define E_SHAPE GDN_ERR_SHAPE
#define E_STRIDE GDN_ERR_STRIDE
#define E_VALUE GDN_ERR_VALUE

const bad_case bad_cases[] = {
    /* delta rule, equal-length batch, KV pool */
    {FX_DR, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_DR, "NULL args", m_null_args, E_NULL, "args is NULL"},
    {FX_DR, "q absent", d_q_absent, E_NULL, "q is absent"},
    {FX_DR, "k absent", d_k_absent, E_NULL, "k is absent"},
    {FX_DR, "v absent", d_v_absent, E_NULL, "v is absent"},
    {FX_DR, "beta absent", d_beta_absent, E_NULL, "beta is absent"},
    {FX_DR, "out absent", d_out_absent, E_NULL, "out is absent"},
    {FX_DR, "q ndim 3", d_q_ndim3, E_SHAPE, "q.ndim"},
    {FX_DR, "k ndim 5", d_k_ndim5, E_SHAPE, "k.ndim"},
    {FX_DR, "v ndim 0", d_v_ndim0, E_SHAPE, "v.ndim"},
    {FX_DR, "q H = 0", d_q_H0, E_SHAPE, "q.shape[2]"},
    {FX_DR, "q T = -1", d_q_Tneg, E_SHAPE, "q.shape[1]"},
    {FX_DR, "k H != q H", d_k_H, E_SHAPE, "k.shape[2]"},
    {FX_DR, "k K != q K", d_k_K, E_SHAPE, "k.shape[3]"},
    {FX_DR, "k T != q T", d_k_T, E_SHAPE, "k.shape[1]"},
    {FX_DR, "v batch", d_v_B, E_SHAPE, "v.shape[0]"},
    {FX_DR, "v T", d_v_T, E_SHAPE, "v.shape[1]"},
    {FX_DR, "HV % H != 0", d_v_HV3, E_SHAPE, "multiple of q.shape[2]"},
    {FX_DR, "v V = 0", d_v_V0, E_SHAPE, "v.shape[3]"},
    {FX_DR, "g HV", d_g_HV, E_SHAPE, "g.shape[2]"},
    {FX_DR, "g T", d_g_T, E_SHAPE, "g.shape[1]"},
    {FX_DR, "g ndim 4", d_g_ndim4, E_SHAPE, "g.ndim"},
    {FX_DR, "beta batch", d_beta_B, E_SHAPE, "beta.shape[0]"},
    {FX_DR, "beta HV", d_beta_HV, E_SHAPE, "beta.shape[2]"},
    {FX_DR, "out V", d_out_V, E_SHAPE, "out.shape[3]"},
    {FX_DR, "out HV", d_out_HV, E_SHAPE, "out.shape[2]"},
    {FX_DR, "out T", d_out_T, E_SHAPE, "out.shape[1]"},
    {FX_DR, "state HV (KV)", d_state_HV, E_SHAPE, "state.shape[1]"},
    {FX_DR, "state K (KV)", d_state_dim2, E_SHAPE, "state.shape[2]"},
    {FX_DR, "state V (KV)", d_state_dim3, E_SHAPE, "state.shape[3]"},
    {FX_DR, "state ndim 3", d_state_ndim3, E_SHAPE, "state.ndim"},
    {FX_DR, "layout VK on a KV pool", d_layout_vk, E_SHAPE, "state.shape[2]"},
    {FX_DR, "k dtype != q dtype", d_k_bf16, E_DTYPE, "k.dtype"},
    {FX_DR, "v dtype != q dtype", d_v_f16, E_DTYPE, "v.dtype"},
    {FX_DR, "q i32", d_q_i32, E_DTYPE, "q.dtype"},
    {FX_DR, "q dtype 99", d_q_dtype99, E_DTYPE, "q.dtype"},
    {FX_DR, "g u8", d_g_u8, E_DTYPE, "g.dtype"},
    {FX_DR, "beta i64", d_beta_i64, E_DTYPE, "beta.dtype"},
    {FX_DR, "out i32", d_out_i32, E_DTYPE, "out.dtype"},
    {FX_DR, "state f16", d_state_f16, E_DTYPE, "state.dtype"},
    {FX_DR, "state_slots f32", d_slots_f32, E_DTYPE, "state_slots.dtype"},
    {FX_DR, "has_initial_state f32", d_init_f32, E_DTYPE, "has_initial_state.dtype"},
    {FX_DR, "has_initial_state i64", d_init_i64, E_DTYPE, "has_initial_state.dtype"},
    {FX_DR, "q last stride 2", d_q_stride3, E_STRIDE, "q.stride[3]"},
    {FX_DR, "v last stride 0", d_v_stride3_0, E_STRIDE, "v.stride[3]"},
    {FX_DR, "out last stride 2", d_out_stride3, E_STRIDE, "out.stride[3]"},
    {FX_DR, "beta last stride 2", d_beta_stride2, E_STRIDE, "beta.stride[2]"},
    {FX_DR, "k negative stride", d_k_stride1_neg, E_STRIDE, "k.stride[1]"},
    {FX_DR, "state negative stride", d_state_stride0_neg, E_STRIDE, "state.stride[0]"},
    {FX_DR, "state_slots negative stride", d_slots_stride_neg, E_STRIDE, "state_slots.stride[0]"},
    {FX_DR, "chunk 48", d_chunk48, E_VALUE, "chunk_size"},
    {FX_DR, "chunk 256", d_chunk256, E_VALUE, "chunk_size"},
    {FX_DR, "chunk -1", d_chunk_neg, E_VALUE, "chunk_size"},
    {FX_DR, "algorithm 7", d_algo7, E_VALUE, "algorithm"},
    {FX_DR, "precision 3", d_precision3, E_VALUE, "precision"},
    {FX_DR, "gva 5", d_gva5, E_VALUE, "gva"},
    {FX_DR, "state_layout 3", d_layout3, E_VALUE, "state_layout"},
    {FX_DR, "state_layout -1", d_layout_neg, E_VALUE, "state_layout"},
    {FX_DR, "scale NaN", d_scale_nan, E_VALUE, "scale"},
    {FX_DR, "scale +inf", d_scale_inf, E_VALUE, "scale"},
    {FX_DR, "scale -inf", d_scale_ninf, E_VALUE, "scale"},
    {FX_DR, "slot == S", d_slot0_eq_S, E_VALUE, "state_slots[0]"},
    {FX_DR, "slot > S", d_slot1_big, E_VALUE, "state_slots[1]"},
    {FX_DR, "duplicate slots", d_slots_dup, E_VALUE, "state_slots[1]"},
    {FX_DR, "duplicate slots (3,3)", d_slots_dup2, E_VALUE, "distinct"},
    {FX_DR, "state_slots length 3", d_slots_len3, E_SHAPE, "state_slots.shape[0]"},
    {FX_DR, "state_slots length 1", d_slots_len1, E_SHAPE, "state_slots.shape[0]"},
    {FX_DR, "state_slots ndim 2", d_slots_ndim2, E_SHAPE, "state_slots.ndim"},
    {FX_DR, "state_slots without state", d_slots_no_state, E_VALUE, "state_slots"},
    {FX_DR, "has_initial_state without state", d_init_no_state, E_VALUE, "has_initial_state"},
    {FX_DR, "has_initial_state length 3", d_init_len3, E_SHAPE, "has_initial_state.shape[0]"},
    {FX_DR, "has_initial_state length 1", d_init_len1, E_SHAPE, "has_initial_state.shape[0]"},
    {FX_DR, "pool smaller than N, no slots", d_pool_small, E_SHAPE, "state.shape[0]"},
    {FX_DR, "cu_seqlens with B = 2", d_cu_B2, E_SHAPE, "cu_seqlens"},
    {FX_DR, "out aliases v, other strides", d_out_alias_v_stride, E_VALUE, "out overlaps v"},
    {FX_DR, "out aliases v, other dtype", d_out_alias_v_dtype, E_VALUE, "out overlaps v"},
    {FX_DR, "out aliases q, other strides", d_out_alias_q_stride, E_VALUE, "out overlaps q"},
    {FX_DR, "out is v (no in-place delta rule)", d_out_is_v, E_VALUE, "out overlaps v"},
    {FX_DR, "out overlaps v, shifted", d_out_overlaps_v, E_VALUE, "out overlaps v"},
    {FX_DR, "every slot skipped (valid)", d_slots_skip_all, GDN_OK, ""},
    /* delta rule, VK pool (bf16 activations) */
    {FX_DR_VK, "state V (VK)", d_state_vk_dim2, E_SHAPE, "state.shape[2]"},
    {FX_DR_VK, "state K (VK)", d_state_vk_dim3, E_SHAPE, "state.shape[3]"},
    {FX_DR_VK, "state HV (VK)", d_state_HV8, E_SHAPE, "state.shape[1]"},
    {FX_DR_VK, "layout KV on a VK pool", d_layout_kv, E_SHAPE, "state.shape[2]"},
    {FX_DR_VK, "q f32, k bf16", d_q_f32, E_DTYPE, "k.dtype"},
    {FX_DR_VK, "out V", d_out_V, E_SHAPE, "out.shape[3]"},
    {FX_DR_VK, "chunk 48", d_chunk48, E_VALUE, "chunk_size"},
    {FX_DR_VK, "every slot skipped (valid)", d_slots_skip_all, GDN_OK, ""},
    /* delta rule, varlen */
    {FX_DR_VAR, "cu_seqlens[0] = 1", d_cu0_1, E_VALUE, "cu_seqlens[0]"},
    {FX_DR_VAR, "cu_seqlens[0] = -1", d_cu0_neg, E_VALUE, "cu_seqlens[0]"},
    {FX_DR_VAR, "cu_seqlens decreasing at 2", d_cu_decr, E_VALUE, "cu_seqlens[2]"},
    {FX_DR_VAR, "cu_seqlens decreasing at 1", d_cu_decr1, E_VALUE, "cu_seqlens[1]"},
    {FX_DR_VAR, "cu_seqlens ends before T", d_cu_end_short, E_VALUE, "cu_seqlens[2]"},
    {FX_DR_VAR, "cu_seqlens ends after T", d_cu_end_long, E_VALUE, "cu_seqlens[2]"},
    {FX_DR_VAR, "cu_seqlens f32", d_cu_f32, E_DTYPE, "cu_seqlens.dtype"},
    {FX_DR_VAR, "cu_seqlens u8", d_cu_u8, E_DTYPE, "cu_seqlens.dtype"},
    {FX_DR_VAR, "cu_seqlens length 1 (no sequence) with tokens", d_cu_len1, E_VALUE,
     "cu_seqlens[0]"},
    {FX_DR_VAR, "cu_seqlens ndim 2", d_cu_ndim2, E_SHAPE, "cu_seqlens.ndim"},
    {FX_DR_VAR, "cu_seqlens length 0", d_cu_len0, E_SHAPE, "cu_seqlens.shape[0]"},
    {FX_DR, "state pool broadcast over slots", d_state_bcast, E_STRIDE, "state.stride[0]"},
    {FX_DR, "out broadcast over the batch", d_out_bcast, E_STRIDE, "out.stride[0]"},
    {FX_DR, "out tokens one element apart", d_out_rows_overlap, E_STRIDE, "out.stride["},
    {FX_DR, "state_slots broadcast", d_slots_bcast, E_STRIDE, "state_slots.stride[0]"},
    {FX_DR, "q off its element alignment", d_q_misaligned, E_VALUE, "q.data"},
    {FX_DR, "state off its element alignment", d_state_misaligned, E_VALUE, "state.data"},
    {FX_DR, "state overlaps out", d_state_on_out, E_VALUE, "state overlaps out"},
    {FX_DR, "state overlaps g", d_state_on_g, E_VALUE, "state overlaps g"},
    {FX_DR, "out overlaps beta", d_out_on_beta, E_VALUE, "out overlaps beta"},
    {FX_DR, "K = 2^32", d_K_2p32, E_VALUE, "q.shape[3]"},
    {FX_DR, "V = 2^59 + 1", d_V_huge, E_VALUE, "v.shape[3]"},
    {FX_DR, "v's strides past the address space", d_stride_wraps, E_VALUE, "v's shape"},
    {FX_DRWS, "V = 2^59 + 1 (size query)", d_V_huge, E_VALUE, "v.shape[3]"},
    {FX_DR_VAR, "cu_seqlens negative stride", d_cu_stride_neg, E_STRIDE, "cu_seqlens.stride[0]"},
    {FX_DR_VAR, "varlen with B = 2", d_varlen_B2, E_SHAPE, "cu_seqlens"},
    {FX_DR_VAR, "state_slots length 1 (N = 2)", d_slots_len1, E_SHAPE, "state_slots.shape[0]"},
    {FX_DR_VAR, "slot > S", d_slot1_big, E_VALUE, "state_slots[1]"},
    {FX_DR_VAR, "duplicate slots", d_slots_dup, E_VALUE, "state_slots[1]"},
    {FX_DR_VAR, "has_initial_state length 3", d_init_len3, E_SHAPE, "has_initial_state.shape[0]"},
    {FX_DR_VAR, "state f16", d_state_f16, E_DTYPE, "state.dtype"},
    {FX_DR_VAR, "every slot skipped (valid)", d_slots_skip_all, GDN_OK, ""},
    /* delta rule, gate in kernel */
    {FX_DR_GATE, "g (raw a) absent", d_g_absent, E_NULL, "g is absent"},
    {FX_DR_GATE, "A wrong size", d_A_3, E_SHAPE, "gating.A.shape[0]"},
    {FX_DR_GATE, "A absent", d_A_absent, E_NULL, "gating.A"},
    {FX_DR_GATE, "A ndim 2", d_A_ndim2, E_SHAPE, "gating.A.ndim"},
    {FX_DR_GATE, "A i32", d_A_i32, E_DTYPE, "gating.A.dtype"},
    {FX_DR_GATE, "dt_bias wrong size", d_dtb_5, E_SHAPE, "gating.dt_bias.shape[0]"},
    {FX_DR_GATE, "a_form 4", d_aform4, E_VALUE, "gating.a_form"},
    {FX_DR_GATE, "softplus_threshold 0", d_thr0, E_VALUE, "gating.softplus_threshold"},
    {FX_DR_GATE, "softplus_threshold -1", d_thr_neg, E_VALUE, "gating.softplus_threshold"},
    {FX_DR_GATE, "softplus_threshold NaN", d_thr_nan, E_VALUE, "gating.softplus_threshold"},
    {FX_DR_GATE, "every slot skipped (valid)", d_slots_skip_all, GDN_OK, ""},
    /* delta rule workspace query */
    {FX_DRWS, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_DRWS, "NULL args", m_null_args, E_NULL, "args is NULL"},
    {FX_DRWS, "NULL bytes", m_null_bytes, E_NULL, "bytes is NULL"},
    {FX_DRWS, "chunk 48", d_chunk48, E_VALUE, "chunk_size"},
    {FX_DRWS, "k H != q H", d_k_H, E_SHAPE, "k.shape[2]"},
    {FX_DRWS, "slot == S", d_slot0_eq_S, E_VALUE, "state_slots[0]"},
    {FX_DRWS, "state f16", d_state_f16, E_DTYPE, "state.dtype"},
    /* conv1d */
    {FX_CONV, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_CONV, "NULL args", m_null_args, E_NULL, "args is NULL"},
    {FX_CONV, "x absent", c_x_absent, E_NULL, "x is absent"},
    {FX_CONV, "weight absent", c_w_absent, E_NULL, "weight is absent"},
    {FX_CONV, "out absent", c_out_absent, E_NULL, "out is absent"},
    {FX_CONV, "x ndim 2", c_x_ndim2, E_SHAPE, "x.ndim"},
    {FX_CONV, "weight ndim 1", c_w_ndim1, E_SHAPE, "weight.ndim"},
    {FX_CONV, "bias ndim 2", c_bias_ndim2, E_SHAPE, "bias.ndim"},
    {FX_CONV, "x C = 0", c_x_C0, E_SHAPE, "x.shape[2]"},
    {FX_CONV, "weight C", c_w_C, E_SHAPE, "weight.shape[0]"},
    {FX_CONV, "width 1", c_w_W1, E_SHAPE, "weight.shape[1]"},
    {FX_CONV, "width 17", c_w_W17, E_SHAPE, "weight.shape[1]"},
    {FX_CONV, "width 0", c_w_W0, E_SHAPE, "weight.shape[1]"},
    {FX_CONV, "bias C", c_bias_C, E_SHAPE, "bias.shape[0]"},
    {FX_CONV, "out T", c_out_T, E_SHAPE, "out.shape[1]"},
    {FX_CONV, "out batch", c_out_B, E_SHAPE, "out.shape[0]"},
    {FX_CONV, "out ndim 4", c_out_ndim4, E_SHAPE, "out.ndim"},
    {FX_CONV, "conv_state width 4 (W = 4)", c_st_W4, E_SHAPE, "conv_state.shape[2]"},
    {FX_CONV, "conv_state width 2 (W = 4)", c_st_W2, E_SHAPE, "conv_state.shape[2]"},
    {FX_CONV, "conv_state C", c_st_C, E_SHAPE, "conv_state.shape[1]"},
    {FX_CONV, "conv_state ndim 2", c_st_ndim2, E_SHAPE, "conv_state.ndim"},
    {FX_CONV, "conv_state f16 with x f32", c_st_f16, E_DTYPE, "conv_state.dtype"},
    {FX_CONV, "conv_state i32", c_st_i32, E_DTYPE, "conv_state.dtype"},
    {FX_CONV, "x i64", c_x_i64, E_DTYPE, "x.dtype"},
    {FX_CONV, "weight u8", c_w_u8, E_DTYPE, "weight.dtype"},
    {FX_CONV, "bias i32", c_bias_i32, E_DTYPE, "bias.dtype"},
    {FX_CONV, "out i32", c_out_i32, E_DTYPE, "out.dtype"},
    {FX_CONV, "state_slots f32", c_slots_f32, E_DTYPE, "state_slots.dtype"},
    {FX_CONV, "has_initial_state f32", c_init_f32, E_DTYPE, "has_initial_state.dtype"},
    {FX_CONV, "x last stride 2", c_x_stride2, E_STRIDE, "x.stride[2]"},
    {FX_CONV, "weight last stride 2", c_w_stride1, E_STRIDE, "weight.stride[1]"},
    {FX_CONV, "out last stride 3", c_out_stride2, E_STRIDE, "out.stride[2]"},
    {FX_CONV, "x negative stride", c_x_stride0_neg, E_STRIDE, "x.stride[0]"},
    {FX_CONV, "conv_state negative stride", c_st_stride2_neg, E_STRIDE, "conv_state.stride[2]"},
    {FX_CONV, "bias negative stride", c_bias_stride_neg, E_STRIDE, "bias.stride[0]"},
    {FX_CONV, "activation 9", c_act9, E_VALUE, "activation"},
    {FX_CONV, "activation -1", c_act_neg, E_VALUE, "activation"},
    {FX_CONV, "slot == S", c_slot0_eq_S, E_VALUE, "state_slots[0]"},
    {FX_CONV, "slot > S", c_slot1_big, E_VALUE, "state_slots[1]"},
    {FX_CONV, "duplicate slots", c_slots_dup, E_VALUE, "state_slots[1]"},
    {FX_CONV, "state_slots without conv_state", c_slots_no_state, E_VALUE, "state_slots"},
    {FX_CONV, "has_initial_state without conv_state", c_init_no_state, E_VALUE,
     "has_initial_state"},
    {FX_CONV, "has_initial_state length 3", c_init_len3, E_SHAPE, "has_initial_state.shape[0]"},
    {FX_CONV, "has_initial_state length 1", c_init_len1, E_SHAPE, "has_initial_state.shape[0]"},
    {FX_CONV, "state_slots length 3", c_slots_len3, E_SHAPE, "state_slots.shape[0]"},
    {FX_CONV, "pool smaller than N, no slots", c_pool_small, E_SHAPE, "conv_state.shape[0]"},
    {FX_CONV, "cu_seqlens with B = 2", c_cu_B2, E_SHAPE, "cu_seqlens"},
    {FX_CONV, "out aliases x, other strides", c_out_alias_x_stride, E_STRIDE, "out aliases x"},
    {FX_CONV, "out aliases x, other dtype", c_out_alias_x_dtype, E_DTYPE, "out aliases x"},
    {FX_CONV, "out overlaps x, shifted by one", c_out_overlaps_x, E_VALUE, "out overlaps x"},
    {FX_CONV, "every slot skipped (valid)", c_slots_skip_all, GDN_OK, ""},
    /* conv1d varlen */
    {FX_CONV_VAR, "cu_seqlens[0] = 1", c_cu0_1, E_VALUE, "cu_seqlens[0]"},
    {FX_CONV_VAR, "cu_seqlens decreasing", c_cu_decr, E_VALUE, "cu_seqlens[2]"},
    {FX_CONV_VAR, "cu_seqlens ends before T", c_cu_end, E_VALUE, "cu_seqlens[2]"},
    {FX_CONV_VAR, "cu_seqlens f32", c_cu_f32, E_DTYPE, "cu_seqlens.dtype"},
    {FX_CONV_VAR, "cu_seqlens length 1 (no sequence) with tokens", c_cu_len1, E_VALUE,
     "cu_seqlens[0]"},
    {FX_CONV_VAR, "varlen with B = 2", c_varlen_B2, E_SHAPE, "cu_seqlens"},
    {FX_CONV_VAR, "state_slots length 3 (N = 2)", c_slots_len3, E_SHAPE, "state_slots.shape[0]"},
    {FX_CONV_VAR, "has_initial_state length 1", c_init_len1, E_SHAPE,
     "has_initial_state.shape[0]"},
    {FX_CONV_VAR, "every slot skipped (valid)", c_slots_skip_all, GDN_OK, ""},
    /* conv1d_update */
    {FX_UPD, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_UPD, "NULL args", m_null_args, E_NULL, "args is NULL"},
    {FX_UPD, "x absent", u_x_absent, E_NULL, "x is absent"},
    {FX_UPD, "weight absent", u_w_absent, E_NULL, "weight is absent"},
    {FX_UPD, "out absent", u_out_absent, E_NULL, "out is absent"},
    {FX_UPD, "conv_state absent", u_st_absent, E_NULL, "conv_state is absent"},
    {FX_UPD, "x ndim 3", u_x_ndim3, E_SHAPE, "x.ndim"},
    {FX_UPD, "x C = 0", u_x_C0, E_SHAPE, "x.shape[1]"},
    {FX_UPD, "width 1", u_w_W1, E_SHAPE, "weight.shape[1]"},
    {FX_UPD, "width 17", u_w_W17, E_SHAPE, "weight.shape[1]"},
    {FX_UPD, "weight C", u_w_C, E_SHAPE, "weight.shape[0]"},
    {FX_UPD, "out N", u_out_N, E_SHAPE, "out.shape[0]"},
    {FX_UPD, "conv_state width", u_st_W, E_SHAPE, "conv_state.shape[2]"},
    {FX_UPD, "conv_state C", u_st_C, E_SHAPE, "conv_state.shape[1]"},
    {FX_UPD, "conv_state f16 with x bf16", u_st_f16, E_DTYPE, "conv_state.dtype"},
    {FX_UPD, "slot == S", u_slot2_eq_S, E_VALUE, "state_slots[2]"},
    {FX_UPD, "duplicate slots", u_slots_dup, E_VALUE, "state_slots[2]"},
    {FX_UPD, "state_slots length 2", u_slots_len2, E_SHAPE, "state_slots.shape[0]"},
    {FX_UPD, "state_slots u8", u_slots_u8, E_DTYPE, "state_slots.dtype"},
    {FX_UPD, "pool smaller than N, no slots", u_pool_small, E_SHAPE, "conv_state.shape[0]"},
    {FX_UPD, "activation 9", u_act9, E_VALUE, "activation"},
    {FX_UPD, "x last stride 2", u_x_stride1, E_STRIDE, "x.stride[1]"},
    {FX_UPD, "out aliases x, other strides", u_out_alias_x_stride, E_STRIDE, "out aliases x"},
    {FX_UPD, "every slot skipped (valid)", u_slots_skip_all, GDN_OK, ""},
    /* gating */
    {FX_GATE, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_GATE, "NULL params", m_null_args, E_NULL, "params is NULL"},
    {FX_GATE, "NULL a pointer", m_null_in, E_NULL, "a is absent"},
    {FX_GATE, "a absent", g_a_absent, E_NULL, "a is absent"},
    {FX_GATE, "g_out is b (in place on the wrong input)", g_gout_is_b, E_VALUE,
     "g_out overlaps b"},
    {FX_GATE, "beta_out is a", g_beta_out_is_a, E_VALUE, "beta_out overlaps a"},
    {FX_GATE, "NULL g_out pointer", m_null_out, E_NULL, "g_out is absent"},
    {FX_GATE, "g_out absent", g_gout_absent, E_NULL, "g_out is absent"},
    {FX_GATE, "b given without beta_out", g_b_without_beta_out, E_NULL, "beta_out"},
    {FX_GATE, "beta_out given without b", g_beta_out_without_b, E_NULL, "b is absent"},
    {FX_GATE, "a ndim 5", g_a_ndim5, E_SHAPE, "a.ndim"},
    {FX_GATE, "a ndim 0", g_a_ndim0, E_SHAPE, "a.ndim"},
    {FX_GATE, "a HV = 0", g_a_HV0, E_SHAPE, "a.shape[2]"},
    {FX_GATE, "g_out T", g_gout_T, E_SHAPE, "g_out.shape[1]"},
    {FX_GATE, "g_out ndim 4 ([2,5,4,1])", g_gout_ndim4, E_SHAPE, "g_out.ndim"},
    {FX_GATE, "b HV", g_b_HV, E_SHAPE, "b.shape[2]"},
    {FX_GATE, "beta_out batch", g_beta_out_B, E_SHAPE, "beta_out.shape[0]"},
    {FX_GATE, "A wrong size", g_A_3, E_SHAPE, "params.A.shape[0]"},
    {FX_GATE, "A absent", g_A_absent, E_NULL, "params.A"},
    {FX_GATE, "A i64", g_A_i64, E_DTYPE, "params.A.dtype"},
    {FX_GATE, "dt_bias wrong size", g_dtb_5, E_SHAPE, "params.dt_bias.shape[0]"},
    {FX_GATE, "a_form 4", g_aform4, E_VALUE, "params.a_form"},
    {FX_GATE, "softplus_threshold 0", g_thr0, E_VALUE, "softplus_threshold"},
    {FX_GATE, "softplus_threshold -1", g_thr_neg, E_VALUE, "softplus_threshold"},
    {FX_GATE, "softplus_threshold inf", g_thr_inf, E_VALUE, "softplus_threshold"},
    {FX_GATE, "softplus_threshold NaN", g_thr_nan, E_VALUE, "softplus_threshold"},
    {FX_GATE, "a i32", g_a_i32, E_DTYPE, "a.dtype"},
    {FX_GATE, "beta_out u8", g_beta_out_u8, E_DTYPE, "beta_out.dtype"},
    {FX_GATE, "a last stride 2", g_a_stride2, E_STRIDE, "a.stride[2]"},
    {FX_GATE, "g_out negative stride", g_gout_stride0_neg, E_STRIDE, "g_out.stride[0]"},
    {FX_GATE, "g_out aliases a, other strides", g_gout_alias_a_stride, E_STRIDE,
     "g_out aliases a"},
    {FX_GATE, "g_out aliases a, other dtype", g_gout_alias_a_dtype, E_DTYPE, "g_out aliases a"},
    {FX_GATE, "beta_out aliases b, other strides", g_beta_out_alias_b_stride, E_STRIDE,
     "beta_out aliases b"},
    /* l2norm */
    {FX_L2, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_L2, "NULL x pointer", m_null_in, E_NULL, "x is absent"},
    {FX_L2, "x absent", l_x_absent, E_NULL, "x is absent"},
    {FX_L2, "NULL out pointer", m_null_out, E_NULL, "out is absent"},
    {FX_L2, "x ndim 5", l_x_ndim5, E_SHAPE, "x.ndim"},
    {FX_L2, "x D = 0", l_x_D0, E_SHAPE, "x.shape[2]"},
    {FX_L2, "out D", l_out_D, E_SHAPE, "out.shape[2]"},
    {FX_L2, "out ndim 4 ([2,3,8,1])", l_out_ndim4, E_SHAPE, "out.ndim"},
    {FX_L2, "x u8", l_x_u8, E_DTYPE, "x.dtype"},
    {FX_L2, "out i32", l_out_i32, E_DTYPE, "out.dtype"},
    {FX_L2, "out last stride 2", l_out_stride2, E_STRIDE, "out.stride[2]"},
    {FX_L2, "x negative stride", l_x_stride1_neg, E_STRIDE, "x.stride[1]"},
    {FX_L2, "eps -1", l_eps_neg, E_VALUE, "eps"},
    {FX_L2, "eps NaN", l_eps_nan, E_VALUE, "eps"},
    {FX_L2, "eps inf", l_eps_inf, E_VALUE, "eps"},
    {FX_L2, "out aliases x, other strides", l_out_alias_x_stride, E_STRIDE, "out aliases x"},
    {FX_L2, "out aliases x, other dtype", l_out_alias_x_dtype, E_DTYPE, "out aliases x"},
    /* rmsnorm_gated */
    {FX_RMS, "NULL ctx", m_null_ctx, E_NULL, "ctx is NULL"},
    {FX_RMS, "NULL args", m_null_args, E_NULL, "args is NULL"},
    {FX_RMS, "x absent", r_x_absent, E_NULL, "x is absent"},
    {FX_RMS, "out absent", r_out_absent, E_NULL, "out is absent"},
    {FX_RMS, "x ndim 5", r_x_ndim5, E_SHAPE, "x.ndim"},
    {FX_RMS, "x D = 0", r_x_D0, E_SHAPE, "x.shape[2]"},
    {FX_RMS, "z T", r_z_T, E_SHAPE, "z.shape[1]"},
    {FX_RMS, "z ndim 4 ([2,4,6,1])", r_z_ndim4, E_SHAPE, "z.ndim"},
    {FX_RMS, "weight wrong size", r_w_5, E_SHAPE, "weight.shape[0]"},
    {FX_RMS, "weight ndim 2", r_w_ndim2, E_SHAPE, "weight.ndim"},
    {FX_RMS, "out D", r_out_D, E_SHAPE, "out.shape[2]"},
    {FX_RMS, "z i32", r_z_i32, E_DTYPE, "z.dtype"},
    {FX_RMS, "weight u8", r_w_u8, E_DTYPE, "weight.dtype"},
    {FX_RMS, "out i64", r_out_i64, E_DTYPE, "out.dtype"},
    {FX_RMS, "z last stride 2", r_z_stride2, E_STRIDE, "z.stride[2]"},
    {FX_RMS, "weight negative stride", r_w_stride_neg, E_STRIDE, "weight.stride[0]"},
    {FX_RMS, "eps negative", r_eps_neg, E_VALUE, "eps"},
    {FX_RMS, "eps NaN", r_eps_nan, E_VALUE, "eps"},
    {FX_RMS, "out aliases x, other strides", r_out_alias_x_stride, E_STRIDE, "out aliases x"},
    {FX_RMS, "out aliases z, other strides", r_out_alias_z_stride, E_STRIDE, "out aliases z"},
};

const size_t n_bad_cases = sizeof bad_cases / sizeof bad_cases[0];
