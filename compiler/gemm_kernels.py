"""The Triton GEMM of :mod:`compiler.half_gemm`: ``c = a @ b (+ bias)``, sizes and leading dims as arguments.

Imported lazily (importing triton picks the interpreter from ``TRITON_INTERPRET``).
``gemm`` computes one ``BM x BN`` tile of ``c`` per program, tiles ordered in groups
of ``GM`` rows of tiles (neighbouring programs share ``b``'s columns in L2).
Layouts are constexprs, leading dims are not: ``A_T`` says ``a`` is stored transposed
(element ``(m, k)`` at ``k * lda + m``), ``B_T`` the same for ``b`` (``(k, n)`` at
``n * ldb + k``); the unit stride is known at compile time, so loads along it vectorize.
Every size and leading dim is ``do_not_specialize``: one binary serves every sequence
length (Triton would otherwise build one per divisibility class of each), and the launcher
(:class:`~compiler.codegen.triton_launch.Launcher`) reuses a binary across integer values, so
a specialization (``lda == 1`` at a first call with one column) would be baked into later
calls: on the H100 that read past the operands (NaN and inf at K=1 and K=13).  ``LD8``
promises that every leading dim is a multiple of 8 (16-byte rows for half types).
``M_EVEN`` / ``N_EVEN`` promise that ``BM`` divides M / ``BN`` divides N: only then are
the contiguous ``m`` (``A_T``) or ``n`` (not ``B_T``) indices hinted contiguous; rows past
M (columns past N) are otherwise wrapped into range (``rm % M``), read and never stored.
K runs in whole ``BK`` blocks unmasked, then one masked block for its remainder.
``UPCAST`` multiplies in fp32 (the interpreter's ``tl.dot`` gets bfloat16 wrong).

Example (under ``TRITON_INTERPRET=1`` on CPU, or on CUDA)::

    >>> from compiler.gemm_kernels import gemm
    >>> hasattr(gemm, "run")  # launched by compiler.half_gemm.matmul
    True
"""
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M", "N", "K", "lda", "ldb", "ldc"])
def gemm(a, b, bias, c, M, N, K, lda, ldb, ldc,
         A_T: tl.constexpr, B_T: tl.constexpr, HAS_BIAS: tl.constexpr, LD8: tl.constexpr,
         M_EVEN: tl.constexpr, N_EVEN: tl.constexpr, UPCAST: tl.constexpr,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GM * tiles_n
    first = (pid // per_group) * GM
    rows = tl.minimum(tiles_m - first, GM)
    pm = first + (pid % per_group) % rows
    pn = (pid % per_group) // rows
    if LD8:
        lda = tl.multiple_of(lda, 8)
        ldb = tl.multiple_of(ldb, 8)
        ldc = tl.multiple_of(ldc, 8)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    # Hints on a dim's wrapped indices are only true where BM (BN) divides it.
    if M_EVEN:
        am = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    else:
        am = rm % M
    if N_EVEN:
        bn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    else:
        bn = rn % N
    if A_T:
        pa = a + am[:, None] + rk[None, :] * lda
        step_a = BK * lda
    else:
        pa = a + am[:, None] * lda + rk[None, :]
        step_a = BK
    if B_T:
        pb = b + rk[:, None] + bn[None, :] * ldb
        step_b = BK
    else:
        pb = b + rk[:, None] * ldb + bn[None, :]
        step_b = BK * ldb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K // BK):
        x = tl.load(pa)
        y = tl.load(pb)
        if UPCAST:
            x, y = x.to(tl.float32), y.to(tl.float32)
        acc = tl.dot(x, y, acc)
        pa += step_a
        pb += step_b
    rem = K % BK
    if rem > 0:
        x = tl.load(pa, mask=rk[None, :] < rem, other=0.0)
        y = tl.load(pb, mask=rk[:, None] < rem, other=0.0)
        if UPCAST:
            x, y = x.to(tl.float32), y.to(tl.float32)
        acc = tl.dot(x, y, acc)
    if HAS_BIAS:
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(c + rm[:, None] * ldc + rn[None, :], acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


__all__ = ["gemm"]
