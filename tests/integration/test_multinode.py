"""Three Ray nodes on one machine (`ray.cluster_utils.Cluster`: a head with no CPUs and two 1-CPU workers), driven
through the `ragline` CLI as a user would: ingest and re-embedding spread their embedding actors over both workers,
adapt's question writer puts a vLLM engine on each (and what it writes reconciles with its counts), a two-worker
training run with placement_strategy STRICT_SPREAD puts one worker on each node, and a worker node killed in the
middle of a sync (new documents, an edited one, a deleted file) is survived in-run: the run publishes one complete
version with every change in it, every document once.

What the kill costs depends on what the node held. An embedding actor there is restarted on another node and its
block retried. Blocks of the fused read→chunk task there are rebuilt by running that task again; its dedup
decisions come from the run's ledger, which answers a replayed batch as it answered the first time (the ledger is
replay-safe), so the re-run yields the same blocks and Ray Data carries on.

The cluster runs in a process of its own with a private RAY_TMPDIR: `Cluster` writes (and on shutdown deletes) the
machine's "current cluster" address file, which `ray.init("auto")` of everyone else on this machine reads, and it
would share Ray's process-global state with the session's `ray_cluster` if it lived in the pytest process."""

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from app.catalog import Catalog
from app.index.build import load_chunks
from app.storage import Storage
from tests.helpers import PLANTED, SAMPLE, topic_text

RAGLINE = str(Path(sys.executable).parent / "ragline")

HOST = r"""
import json, sys, traceback
from ray.cluster_utils import Cluster

# The head takes no work (no CPUs): every task and actor that needs a CPU lands on a worker node.
cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False})
nodes = {}

def add():
    node = cluster.add_node(num_cpus=1)
    nodes[node.node_id] = node
    return node.node_id

def kill(node_id):
    cluster.remove_node(nodes.pop(node_id), allow_graceful=False)
    # until the GCS has missed enough heartbeats to call the node dead, it still places actors there
    cluster.wait_for_nodes(timeout=120)
    return node_id

try:
    print(json.dumps({"address": cluster.address, "head": cluster.head_node.node_id, "workers": [add(), add()]}),
          flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        try:
            reply = {"killed": kill(args[0])} if cmd == "kill" else {"added": add()}
        except Exception:
            reply = {"error": traceback.format_exc()}
        print(json.dumps(reply), flush=True)
finally:
    cluster.shutdown()
"""


class ClusterHost:
    """The Cluster's process: its stdin takes `kill NODE_ID` and `add`, its stdout answers one JSON line each."""

    def __init__(self, tmp: Path):
        self.env = {**os.environ, "RAY_TMPDIR": str(tmp)}
        self.env.pop("RAY_ADDRESS", None)
        self.err = tmp / "host.err"
        with self.err.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, env=self.env, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout or []],
                         daemon=True).start()
        try:
            first = self._reply(180)
        except ClusterError:
            self.kill_all()
            raise
        self.address: str = first["address"]
        self.head: str = first["head"]
        self.workers: list[str] = first["workers"]

    def _reply(self, timeout: float) -> dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                reply = dict(json.loads(self.lines.get(timeout=1)))
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise ClusterError(f"the cluster process exited: {self.err.read_text()[-3000:]}") from None
                continue
            if "error" in reply:
                raise ClusterError(reply["error"])
            return reply
        raise ClusterError(f"the cluster process did not answer in {timeout}s: {self.err.read_text()[-3000:]}")

    def _send(self, line: str, timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout)

    def kill(self, node_id: str) -> None:
        """Every process of the node SIGKILLed at once, as when a machine drops off the network; returns once the
        cluster has noticed."""
        self._send(f"kill {node_id}", 180)
        self.workers.remove(node_id)

    def add(self) -> str:
        node_id = str(self._send("add", 120)["added"])
        self.workers.append(node_id)
        return node_id

    def shutdown(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # the host's loop ends and it shuts the cluster down
            self.proc.wait(timeout=120)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.kill_all()

    def kill_all(self) -> None:
        """The host and every Ray process it started (they share its process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def ragline(self, store: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd = [RAGLINE, "--storage", str(store), "--address", self.address, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)

    def ragline_bg(self, store: Path, *args: str) -> subprocess.Popen:
        cmd = [RAGLINE, "--storage", str(store), "--address", self.address, *args]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
                                start_new_session=True)


class ClusterError(RuntimeError):
    pass


@pytest.fixture(scope="module")
def cluster():
    """Started twice at most: on a loaded machine a raylet can miss Ray's fixed 30 s start-up deadline."""
    for attempt in (1, 2):
        tmp = Path(tempfile.mkdtemp(prefix="rl-mn-", dir="/tmp"))  # short: Ray's unix sockets live under it
        host = None
        try:
            host = ClusterHost(tmp)
        except ClusterError:
            if attempt == 2:
                raise
            continue
        finally:
            if host is None:
                shutil.rmtree(tmp, ignore_errors=True)
        try:
            yield host
        finally:
            host.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
        return


def corpus(d: Path, first: int, n: int, name: str = "docs.jsonl") -> Path:
    """Documents first..first+n-1, distinct and one chunk each, in one jsonl file; with first 0, the planted zebra
    document too and `gone.txt`, a file the sync test deletes.

    Ray Data hands the embedding actors whole blocks of up to 512 KiB, and a corpus fills several only past a MB or
    so. So every record carries ~5 KB of metadata (kept in each chunk row, never embedded): 500 short documents
    make about eight blocks, enough for every actor to get some, while costing seconds to embed."""
    d.mkdir(parents=True, exist_ok=True)
    with (d / name).open("w") as f:
        for i in range(first, first + n):
            f.write(json.dumps({"id": f"doc{i}", "text": topic_text(i, words=12), "notes": f"note{i} " * 700})
                    + "\n")
        if first == 0:
            f.write(json.dumps({"id": "zebra", "title": "Zebra migration", "text": PLANTED}) + "\n")
            (d / "gone.txt").write_text("Okapis are shy forest giraffids of the Ituri rainforest.")
    return d


# Small embedding batches: each block is embedded in several forward passes, as with real chunk lengths.
INGEST = ("--set", "ingest.embed.batch_size=32")
N_DOCS = 500


@pytest.fixture(scope="module")
def ingested(cluster, tmp_path_factory) -> tuple[Path, Path, dict[str, Any]]:
    """(store, corpus, report): the corpus of N_DOCS documents, zebra and gone.txt ingested on the cluster. Tests
    change copies of the store (`shutil.copytree`); only the last changes the corpus."""
    tmp = tmp_path_factory.mktemp("ingested")
    data = corpus(tmp / "c", 0, N_DOCS)
    report = ingest_json(cluster.ragline(tmp / "store", *INGEST, "ingest", str(data), "--in-process", "--json"))
    return tmp / "store", data, report


def ingest_json(done: subprocess.CompletedProcess) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_ingest_and_re_embedding_spread_embedding_actors_over_both_workers(cluster, ingested, tmp_path):
    report = ingested[2]
    assert report["documents"]["kept"] == N_DOCS + 2 and report["reconciled"]
    stages = report["stages"]
    embed = stages["embed"]["rows_by_node"]
    # one actor per worker node (the pool is sized to the 2 free CPUs), and each embedded a share of the chunks
    assert set(embed) == set(cluster.workers), (embed, cluster.workers)
    assert all(rows > 0 for rows in embed.values()) and sum(embed.values()) == report["chunks"]
    for name, s in stages.items():  # the head has no CPUs: no stage ran there
        assert cluster.head not in s["rows_by_node"], name

    # re-embedding (what promoting a trained embedder does) spreads the same way: the packaged MiniLM named by its
    # directory is another embedder to the index
    from app.models import embedder

    other = embedder.resolve("all-MiniLM-L6-v2")
    store = shutil.copytree(ingested[0], tmp_path / "store")
    # two actors: sized to the cores free, the pool could find one still held by the ingest's actors going away
    built = ingest_json(cluster.ragline(store, *INGEST, "--set", "ingest.embed.concurrency=2", "index", "build",
                                        "--embedder", other, "--json"))
    assert built["embedder"] == other
    latest = Catalog(Storage(str(store))).latest("indexes")
    assert latest is not None and latest.version == built["index_version"]
    done = latest.extra["reembedded"]
    assert done["actors"] == 2 and set(done["rows_by_node"]) == set(cluster.workers), done
    assert done["embedded"] == sum(done["rows_by_node"].values()) == report["chunks"], done


# the nodes each vLLM engine actor of ray.data.llm ran on (alive or dead), read from the GCS's actor table
ENGINE_NODES = """
import json, sys
import ray
from ray._private.state import actors
ray.init(address=sys.argv[1], log_to_driver=False)
print(json.dumps(sorted(a["Address"]["NodeID"] for a in actors().values() if "vLLMEngine" in a["ActorClassName"])))
"""


def test_adapts_question_writer_puts_an_engine_on_each_worker_node(cluster, ingested, tmp_path):
    """`ragline adapt questions` with two writer engines: `ray.data.llm` places one vLLM engine actor on each
    1-CPU worker (0.8 CPU each, leaving room for its light stages), SmolLM2 asks two sampled questions about each
    of 8 chunks, the round trip filters the training questions, and what is stored reconciles with the counts."""
    store = shutil.copytree(ingested[0], tmp_path / "store")
    done = cluster.ragline(store, "--set", "adapt.chunks=8", "--set", "adapt.min_chunk_words=5", "--set",
                           "adapt.writer.engines=2", "--set", "adapt.writer.cpus=0.8", "--set",
                           "adapt.writer.batch_size=2", "--set", "adapt.writer.max_tokens=24", "--set",
                           "adapt.writer.questions_per_chunk=2", "--set", "adapt.writer.temperature=0.7", "--set",
                           "adapt.heldout=0.4", "adapt", "questions", "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    q = json.loads(done.stdout)
    n = q["counts"]
    assert n["sampled"] == 16 and n["sampled"] == sum(n["rejected"].values()) + n["dropped"] + n["train"] + \
        n["heldout"], n
    assert n["train"] + n["heldout"] > 0, n
    storage = Storage(str(store))
    lines = {name: storage.read_bytes(q[f"{name}_file"]).decode().splitlines()
             for name in ("train", "heldout", "rejected")}
    assert (len(lines["train"]), len(lines["heldout"]), len(lines["rejected"])) == (
        n["train"], n["heldout"], sum(n["rejected"].values()))
    train = [json.loads(line) for line in lines["train"]]
    assert all(r["question"].endswith("?") and 1 <= r["rank"] <= 20 for r in train), train  # the round trip's k
    heldout = [json.loads(line) for line in lines["heldout"]]
    kept = train + heldout  # each an ask of its chunk, no question twice for one chunk
    assert all(isinstance(a, str) and a for r in kept for a in r["answers"]), kept  # spans, never NaN
    assert not {r["chunk_id"] for r in train} & {r["chunk_id"] for r in heldout}  # a chunk's questions: one side
    assert len({r["id"] for r in kept}) == len(kept) and all(r["id"].startswith(f"{r['chunk_id']}#") for r in kept)
    assert len({(r["chunk_id"], r["question"].lower()) for r in kept}) == len(kept)
    nodes = subprocess.run([sys.executable, "-c", ENGINE_NODES, cluster.address], capture_output=True, text=True,
                           timeout=120, env=cluster.env)
    assert nodes.returncode == 0, nodes.stderr[-3000:]
    assert sorted(json.loads(nodes.stdout)) == sorted(cluster.workers), (nodes.stdout, cluster.workers)


def test_strict_spread_puts_each_training_worker_on_its_own_node(cluster, tmp_path, tiny_lm):
    """Half a CPU each: both workers fit on one 1-CPU node, where PACK (the default) puts them; STRICT_SPREAD must
    use two. The run record says where every rank ran."""
    done = cluster.ragline(
        tmp_path / "store", "train", "sft", "--in-process", "--json", "--set", f"model={tiny_lm}",
        "--set", f"sft.paths=[{SAMPLE}]", "--set", "sft.max_length=128", "--set", "num_workers=2",
        "--set", "cpus_per_worker=0.5", "--set", "placement_strategy=STRICT_SPREAD", "--set", "batch_size=4",
        "--set", "max_steps=2", "--set", "checkpoint_every=2", "--set", "name=spread", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert record["state"] == "succeeded" and record["metrics"]["step"] == 2
    nodes = record["worker_nodes"]  # by rank
    assert len(nodes) == 2 and len(set(nodes)) == 2 and set(nodes) <= set(cluster.workers), (nodes, cluster.workers)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if got := pred():
            return got
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1][-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def assert_complete(storage: Storage, doc_ids: set[str]) -> None:
    """The latest dataset version holds each document once, with unique chunk ids, and verifies."""
    catalog = Catalog(storage)
    m = catalog.latest("datasets")
    assert m is not None and m.counts["documents"] == len(doc_ids)
    table = load_chunks(storage, m)
    ids = table.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)) == m.counts["chunks"]
    assert set(table.column("doc_id").to_pylist()) == doc_ids
    assert catalog.verify(m) == []


@pytest.mark.timeout(1200)
def test_a_worker_node_killed_mid_sync_is_survived_in_run(cluster, ingested, tmp_path):
    """A sync that adds N_DOCS documents, edits one and deletes a file loses a worker node while it embeds: the
    run publishes one complete version, with every change in it and every document once. Runs last: it replaces
    one of the cluster's worker nodes, and changes the module's corpus."""
    store, data = shutil.copytree(ingested[0], tmp_path / "store"), ingested[1]
    segments = store / "datasets" / "segments"
    before = set(segments.glob("*/*.parquet"))
    corpus(data, N_DOCS, N_DOCS, "more.jsonl")  # the bulk of the run: new documents to embed
    (data / "gone.txt").unlink()
    lines = (data / "docs.jsonl").read_text().splitlines(keepends=True)
    edited = {"id": "doc1", "text": "Okapis keep to the dense forest of the Ituri and are rarely seen."}
    (data / "docs.jsonl").write_text("".join([lines[0], json.dumps(edited) + "\n", *lines[2:]]))
    args = (*INGEST, "ingest", str(data), "--sync", "--in-process", "--json")
    proc = cluster.ragline_bg(store, *args)
    try:
        # New shards appear as embedded blocks are written: the run is embedding, with most of the change to go.
        wait_for(lambda: set(segments.glob("*/*.parquet")) - before, 240, "the first embedded shard", proc)
        assert proc.poll() is None, "the run finished before a node could be killed"
        cluster.kill(cluster.workers[0])
        cluster.add()  # a replacement, as an autoscaler would start
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    storage = Storage(str(store))
    doc_ids = {f"doc{i}" for i in range(2 * N_DOCS)} | {"zebra"}
    first = json.loads(out)
    assert first["files"] == {"new": 1, "changed": 1, "unchanged": 0, "deleted": 1, "readmitted": 0,
                              "reread": 0}, first["files"]
    changes = first["changes"]
    assert (changes["added"], changes["updated"], changes["removed"]) == (N_DOCS, 1, 1), changes
    assert first["reconciled"] and changes["live_after"] == len(doc_ids)
    assert first["chunks"] == first["embeddings"]  # and the report asserts both equal the rows written
    assert_complete(storage, doc_ids)  # 0 lost, 0 duplicated, the deleted file's document gone

    # The re-run finds the files as they were published (size, mtime): nothing is read, nothing new is published.
    again = ingest_json(cluster.ragline(store, *args))
    assert again["reconciled"] and again["documents"]["read"] == 0 and again["files"]["unchanged"] == 2
    assert again["note"] == "nothing new to add: no version published"
    assert_complete(storage, doc_ids)
    for question, doc in (("When do zebras cross the Mara river?", "zebra"), ("Where do okapis live?", "doc1")):
        found = cluster.ragline(store, "search", question, "-k", "3", "--json")
        assert found.returncode == 0, found.stderr[-3000:]
        assert json.loads(found.stdout)["hits"][0]["doc_id"] == doc
