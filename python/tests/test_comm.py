"""The communicator from Python (nctmc.Comm; docs/python.md, "Several
processes"): its argument checks and lifetime in one process (the world of
one), and a 2-rank job under mpirun whose training and evaluation must equal
one process's bit for bit. The mpirun tests skip when mpirun or the MPI
module libnctmc-mpi.so is missing; the mpi4py one also without mpi4py.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nctmc
from nctmc import _comm
from nctmc import _native as N

pytestmark = pytest.mark.skipif(not N.HAVE_COMM, reason="the library has no nctmc_comm_*")

SEQ_LEN = 8


def _model(ctx, seed=3):
    return nctmc.Model.create(ctx, vocab_size=6, seq_len=SEQ_LEN, n_layers=1, d_model=32,
                              n_heads=2, cond_dim=16, process="uniform", seed=seed)


def _data(n, seed=0):
    return np.random.default_rng(seed).integers(0, 6, size=(n, SEQ_LEN)).astype(np.int32)


@pytest.fixture
def comm():
    c = nctmc.Comm.from_env()
    yield c
    c.close()


@pytest.fixture(scope="module")
def ctx():
    return nctmc.Context(backend="cpu", threads=1)


# ---- one process: the world of one ----------------------------------------
def test_a_process_alone_is_the_world_of_one(comm):
    assert (comm.rank, comm.size, comm.engine) == (0, 1, "none")
    comm.barrier()
    buf = bytearray(b"abc")
    assert comm.broadcast(buf, 0) is buf and buf == b"abc"
    a = np.arange(4, dtype=np.float32)
    comm.broadcast(a, root=0, nbytes=8)
    comm.broadcast(bytearray(), 0)
    comm.abort(3)  # nothing in the world of one


def test_broadcast_checks_its_buffer_and_root(comm):
    with pytest.raises(ValueError, match="more than the buffer's 4 bytes"):
        comm.broadcast(bytearray(4), 0, nbytes=5)
    with pytest.raises(TypeError, match="read-only"):
        comm.broadcast(b"abcd", 0)
    ro = np.zeros(4, np.int32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        comm.broadcast(ro, 0)
    with pytest.raises(ValueError, match="C-contiguous"):
        comm.broadcast(np.zeros((4, 4), np.float32)[:, 1], 0)
    with pytest.raises(TypeError, match="buffer protocol"):
        comm.broadcast([1, 2, 3], 0)
    for root in (1, -1):
        with pytest.raises(ValueError, match="not a rank"):
            comm.broadcast(bytearray(4), root)
    with pytest.raises(TypeError):
        comm.broadcast(bytearray(4), 0.0)
    with pytest.raises(ValueError):
        comm.broadcast(bytearray(4), 0, nbytes=-1)


def test_a_closed_comm_refuses_every_call(ctx):
    c = nctmc.Comm.from_env()
    c.close()
    c.close()  # twice is fine
    assert c.closed
    for call in (lambda: c.rank, lambda: c.size, lambda: c.engine, c.barrier,
                 lambda: c.broadcast(bytearray(1), 0), lambda: c.abort(1)):
        with pytest.raises(nctmc.Error, match="Comm is closed"):
            call()
    with pytest.raises(nctmc.Error, match="Comm is closed"):
        nctmc.Trainer(_model(ctx), batch_size=2, comm=c)
    with pytest.raises(nctmc.Error, match="Comm is closed"):
        _model(ctx).eval(_data(2), time_samples=1, batch_size=2, comm=c)


def test_comm_must_be_a_comm(ctx):
    with pytest.raises(TypeError, match="nctmc.Comm"):
        nctmc.Trainer(_model(ctx), batch_size=2, comm=1)
    with pytest.raises(TypeError, match="nctmc.Comm"):
        _model(ctx).eval(_data(2), time_samples=1, batch_size=2, comm="mpi")


def test_closing_a_comm_a_trainer_uses_waits_for_the_trainer(ctx, monkeypatch):
    freed = []
    real_free = N.nctmc_comm_free
    monkeypatch.setattr(N, "nctmc_comm_free", lambda p: (freed.append(p), real_free(p)))
    with nctmc.Comm.from_env() as c:
        trainer = nctmc.Trainer(_model(ctx), batch_size=2, comm=c, seed=1)
        assert trainer.comm is c
    assert c.closed and freed == []   # deferred: the trainer still holds it
    stats = trainer.step(_data(2))   # and still works
    assert stats["comm_seconds"] == 0.0
    trainer.close()
    assert len(freed) == 1 and c._pending is None
    # a failed creation gives its use back
    c2 = nctmc.Comm.from_env()
    with pytest.raises(nctmc.Error):
        nctmc.Trainer(_model(ctx), batch_size=2, seq_len=SEQ_LEN + 1, comm=c2)
    assert c2._users == 0
    c2.close()
    assert len(freed) == 2


def test_the_world_of_one_trains_and_evaluates_as_no_comm(ctx, comm):
    x = _data(4)
    a, b = _model(ctx), _model(ctx)
    ta = nctmc.Trainer(a, batch_size=4, seed=5)
    tb = nctmc.Trainer(b, batch_size=4, seed=5, comm=comm)
    sa, sb = ta.step(x), tb.step(x)
    assert sa == sb
    assert "comm" not in tb.params  # a pointer, not a setting
    ra = a.eval(_data(6, 1), time_samples=2, batch_size=4)
    rb = b.eval(_data(6, 1), time_samples=2, batch_size=4, comm=comm)
    assert ra["nelbo_bits_per_token"] == rb["nelbo_bits_per_token"]
    assert comm._users == 1
    tb.close()
    assert comm._users == 0


def test_resume_with_a_comm_splits_the_saved_micro_batches(ctx, comm, tmp_path):
    t = nctmc.Trainer(_model(ctx), batch_size=2, accumulation=3, seed=1)
    t.step(_data(6))
    t.save(tmp_path / "a.st")
    r = nctmc.Trainer.resume(tmp_path / "a.st", ctx, comm=comm)  # 3 / 1 rank
    assert r.comm is comm and r.params["accumulation"] == 3 and comm._users == 1
    assert r.step(_data(6, 1)) == t.step(_data(6, 1))
    r.close()
    assert comm._users == 0
    with pytest.raises(nctmc.Error):   # batch_size must match: the use is given back
        nctmc.Trainer.resume(tmp_path / "a.st", ctx, comm=comm, batch_size=5)
    assert comm._users == 0


def test_from_mpi4py_without_mpi4py_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails
    with pytest.raises(nctmc.Error, match="needs mpi4py") as e:
        nctmc.Comm.from_mpi4py(object())
    assert e.value.status == 3  # NCTMC_ERR_UNSUPPORTED


def test_a_module_that_brings_another_mpi_is_refused(tmp_path, monkeypatch):
    """_check_same_mpi: a stand-in module that links a library named like
    MPICH's, which this process has not loaded, is refused before
    nctmc_comm_from_mpi() could read an MPI_Comm of one MPI as another's."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip("no C compiler")
    (tmp_path / "other.c").write_text("int other_mpi_init(void) { return 0; }\n")
    (tmp_path / "module.c").write_text("int other_mpi_init(void);\n"
                                       "int entry(void) { return other_mpi_init(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "other.c"), "-o",
                    str(tmp_path / "libmpich.so.12")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "module.c"), "-o",
                    str(tmp_path / "module.so"), str(tmp_path / "libmpich.so.12"),
                    "-Wl,-rpath," + str(tmp_path)], check=True)

    class MPI:  # what the check reads of mpi4py's module
        @staticmethod
        def Get_library_version():
            return "Some MPI 1.0\n"
    monkeypatch.setenv("NCTMC_MPI_MODULE", str(tmp_path / "module.so"))
    with pytest.raises(nctmc.Error, match="another MPI library.*libmpich.so.12") as e:
        _comm._check_same_mpi(MPI)
    assert e.value.status == 3  # NCTMC_ERR_UNSUPPORTED
    # a module that brings no MPI of its own passes
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "other.c"), "-o",
                    str(tmp_path / "plain.so")], check=True)
    monkeypatch.setenv("NCTMC_MPI_MODULE", str(tmp_path / "plain.so"))
    _comm._check_same_mpi(MPI)


# ---- two ranks under mpirun -------------------------------------------------
SCRIPT = r'''
import json, sys
import numpy as np
import nctmc

mode, out = sys.argv[1], sys.argv[2]
if mode == "mpi4py":
    from mpi4py import MPI
    comm = nctmc.Comm.from_mpi4py(MPI.COMM_WORLD)
else:
    comm = nctmc.Comm.from_env()
rank, size = comm.rank, comm.size
ctx = nctmc.Context(backend="cpu", threads=1)
model = nctmc.Model.create(ctx, vocab_size=6, seq_len=8, n_layers=1, d_model=32, n_heads=2,
                           cond_dim=16, process="uniform", seed=3)
B = 3
trainer = nctmc.Trainer(model, batch_size=B, seed=7, learning_rate=1e-3, warmup_steps=1,
                        grad_clip=0.05, ema_decay=0.9, comm=comm)
rng = np.random.default_rng(11)
stats = []
for step in range(3):
    x = rng.integers(0, 6, size=(size * B, 8)).astype(np.int32)   # the global batch
    stats.append(trainer.step(x[rank * B:(rank + 1) * B]))         # this rank's share
trainer.save(out + ".st")
# resumed on the same ranks, one more step: the run going on
resumed = nctmc.Trainer.resume(out + ".st", ctx, comm=comm)
x = rng.integers(0, 6, size=(size * B, 8)).astype(np.int32)
resumed.step(x[rank * B:(rank + 1) * B])
resumed.save(out + ".resumed.st")
resumed.close()
held_out = np.random.default_rng(5).integers(0, 6, size=(10, 8)).astype(np.int32)
r = model.eval(held_out, time_samples=2, batch_size=4, seed=1, comm=comm)
# ranks that evaluate different sequences refuse (the comm reached the call)
try:
    model.eval(held_out[rank:], time_samples=2, batch_size=4, seed=1, comm=comm)
    refused = ""
except nctmc.Error as e:
    refused = str(e)
# every rank agrees with rank 0 (broadcast rank 0's bytes)
mine = json.dumps([stats[-1]["loss"], r["nelbo_bits_per_token"]]).encode().ljust(256)
theirs = comm.broadcast(bytearray(mine), root=0)
same = mine == bytes(theirs)
if rank == 0:
    with open(out + ".json", "w") as f:
        json.dump({"size": size, "engine": comm.engine, "stats": stats, "same": same,
                   "refused": refused,
                   "eval": {k: v for k, v in r.items() if k != "reliability"},
                   "reliability": {k: v.tobytes().hex() for k, v in r["reliability"].items()
                                   if hasattr(v, "tobytes")}}, f)
comm.barrier()
trainer.close()
comm.close()
'''


def _one_process(ctx, tmp_path):
    """What the script computes, in one process with accumulation 2: the
    checkpoint after 3 steps, the eval of those weights, the checkpoint
    after a 4th step."""
    model = _model(ctx)
    trainer = nctmc.Trainer(model, batch_size=3, accumulation=2, seed=7, learning_rate=1e-3,
                            warmup_steps=1, grad_clip=0.05, ema_decay=0.9)
    rng = np.random.default_rng(11)
    for _ in range(3):
        trainer.step(rng.integers(0, 6, size=(6, SEQ_LEN)).astype(np.int32))
    trainer.save(tmp_path / "one.st")
    held_out = np.random.default_rng(5).integers(0, 6, size=(10, SEQ_LEN)).astype(np.int32)
    result = model.eval(held_out, time_samples=2, batch_size=4, seed=1)
    trainer.step(rng.integers(0, 6, size=(6, SEQ_LEN)).astype(np.int32))
    trainer.save(tmp_path / "one4.st")
    return result


def _mpirun(tmp_path, mode):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed")
    if _comm.mpi_module_path() is None:
        pytest.skip("the MPI module libnctmc-mpi.so is not beside the library (nor in "
                    "NCTMC_MPI_MODULE)")
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
               NCTMC_LIBRARY=os.path.realpath(N.LIBRARY) if os.path.exists(N.LIBRARY)
               else os.environ.get("NCTMC_LIBRARY", ""),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(nctmc.__file__))))
    if not env["NCTMC_LIBRARY"]:
        del env["NCTMC_LIBRARY"]
    out = tmp_path / mode
    run = subprocess.run([mpirun, "--oversubscribe", "-n", "2", sys.executable, str(script),
                          mode, str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(str(out) + ".json") as f:
        return json.load(f), str(out) + ".st"


def _check_two_ranks_equal_one_process(ctx, tmp_path, mode):
    got, checkpoint = _mpirun(tmp_path, mode)
    assert (got["size"], got["engine"]) == (2, "mpi")
    assert got["same"]
    assert "differ" in got["refused"], got["refused"]
    want = _one_process(ctx, tmp_path)
    # the weights, AdamW moments, EMA and metadata: the same bytes
    with open(checkpoint, "rb") as a, open(tmp_path / "one.st", "rb") as b:
        assert a.read() == b.read(), "2 ranks and one process accumulating 2 differ"
    with open(checkpoint[:-3] + ".resumed.st", "rb") as a, open(tmp_path / "one4.st", "rb") as b:
        assert a.read() == b.read(), "resumed on 2 ranks: not the uninterrupted run"
    assert all(s["comm_seconds"] > 0.0 for s in got["stats"])
    for key, value in got["eval"].items():
        # bit for bit (JSON keeps a double's digits; NaN only equals NaN)
        assert value == want[key] or (value != value and want[key] != want[key]), key
    for key, hexbytes in got["reliability"].items():
        assert hexbytes == want["reliability"][key].tobytes().hex(), key


def test_two_ranks_equal_one_process_accumulating_two(ctx, tmp_path):
    _check_two_ranks_equal_one_process(ctx, tmp_path, "env")


def test_two_ranks_from_mpi4py(ctx, tmp_path):
    pytest.importorskip("mpi4py")
    _check_two_ranks_equal_one_process(ctx, tmp_path, "mpi4py")
