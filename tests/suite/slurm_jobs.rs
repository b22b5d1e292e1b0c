//! The job scripts of docs/HPC.md, submitted to a real one-node Slurm
//! cluster: `scripts/slurm.sh start` brings up munged, slurmctld and
//! slurmd on this machine; each script marked `<!-- job: NAME -->` in the doc
//! is taken verbatim, submitted with `sbatch --wait` (only its image
//! variables set, through `--export`) and its output compared with what this
//! test computes from the source trees:
//! - `dataset`: a generated tree packed to an image, mounted on node-local
//!   `/tmp/$SLURM_JOB_ID/data` by `packfs run`; the job prints the file count
//!   and one SHA-256 over all files, computed here by Python's hashlib from
//!   the source; afterwards neither the mount nor the directory is left.
//! - `venv`, `venv-activate`: a real venv (`python3 -m venv`, a wheel
//!   installed by pip with a console script) packed with `--mount-at
//!   /tmp/$USER/venv --compile`, the source venv then moved away; the job's
//!   `train.py` prints where the interpreter, the package, its `.pyc` and the
//!   console scripts (`pip`, `hello-packfs`) live, all of which must be the
//!   mount path.
//! - and a job cancelled with `scancel` while its image is mounted leaves no
//!   mount and no directory behind.
//!
//! Needs root (jobs run as the submitter and mount with FUSE). Without the
//! Slurm and munge packages the test fails (CI installs them with
//! scripts/setup.sh); it does not skip.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SLURM_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/slurm.sh");
const HPC_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/HPC.md");

/// The one-node cluster, stopped on drop (also when the test panics) unless
/// it was already up before the test, started by someone else's
/// `scripts/slurm.sh start`.
struct Slurm {
    stop: bool,
}

impl Slurm {
    fn start() -> Slurm {
        let was_up = Command::new(SLURM_SH)
            .arg("status")
            .output()
            .is_ok_and(|o| o.status.success());
        let t = Instant::now();
        let out = Command::new(SLURM_SH)
            .arg("start")
            .output()
            .unwrap_or_else(|e| panic!("{SLURM_SH}: {e}"));
        assert!(
            out.status.success(),
            "scripts/slurm.sh start failed (it needs the Debian packages slurm-wlm and munge, \
             which scripts/setup.sh installs):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "slurm {} in {:.1} s",
            if was_up { "reused" } else { "started" },
            t.elapsed().as_secs_f64()
        );
        Slurm { stop: !was_up }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if self.stop {
            let _ = Command::new(SLURM_SH).arg("stop").status();
        }
    }
}

/// The script under `<!-- job: NAME -->` in docs/HPC.md: the fenced `sh`
/// block on the very next line, exactly as the reader sees it.
fn job_script(name: &str) -> String {
    let doc = std::fs::read_to_string(HPC_MD).unwrap();
    let marker = format!("<!-- job: {name} -->");
    let lines: Vec<&str> = doc.lines().collect();
    let at: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim() == marker)
        .collect();
    assert_eq!(at.len(), 1, "docs/HPC.md: {marker} must appear once");
    assert_eq!(
        lines.get(at[0] + 1).map(|l| l.trim()),
        Some("```sh"),
        "docs/HPC.md: {marker} must be followed by a ```sh block"
    );
    let body: Vec<&str> = lines[at[0] + 2..]
        .iter()
        .take_while(|l| l.trim() != "```")
        .copied()
        .collect();
    assert!(
        body.first().is_some_and(|l| l.starts_with("#!")),
        "docs/HPC.md: job {name} must start with #!"
    );
    body.join("\n") + "\n"
}

/// `PATH` for the jobs: the directory of the packfs binary under test first.
fn job_path() -> String {
    let bin = packfs_bin();
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

/// The user name jobs see as `$USER`: a login shell sets it, a test
/// harness may not, and Slurm passes the submitter's environment.
fn user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| run(Command::new("id").arg("-un")).trim().to_string())
}

/// An `sbatch` of the script `name` written to `dir` (also its working
/// directory), with `vars` exported to it; `--wait` unless `wait` is false.
fn sbatch_cmd(dir: &Path, name: &str, script: &str, vars: &[(&str, &Path)], wait: bool) -> Command {
    sbatch_cmd_with(dir, name, script, vars, wait, &[])
}

/// [`sbatch_cmd`] with `extra` options after the usual ones (on sbatch's
/// command line the last of a repeated option wins, and any option there
/// overrides the script's `#SBATCH` line).
fn sbatch_cmd_with(
    dir: &Path,
    name: &str,
    script: &str,
    vars: &[(&str, &Path)],
    wait: bool,
    extra: &[&str],
) -> Command {
    let file = dir.join(format!("{name}.sh"));
    std::fs::write(&file, script).unwrap();
    let mut export = format!("ALL,PATH={}", job_path());
    for (k, v) in vars {
        let v = v.to_str().unwrap();
        assert!(!v.contains(','), "{v}: sbatch --export splits at commas");
        export.push_str(&format!(",{k}={v}"));
    }
    let mut c = Command::new("sbatch");
    c.arg("--parsable")
        .arg(format!("--job-name={name}"))
        .arg(format!("--chdir={}", dir.display()))
        .arg(format!(
            "--output={}",
            dir.join(format!("{name}.out")).display()
        ))
        .arg(format!("--export={export}"))
        .env("USER", user());
    if wait {
        c.arg("--wait");
    }
    c.args(extra).arg(&file);
    c
}

/// Submits the doc's job `name` and waits for it; returns its id and output,
/// panicking with the output if the job failed.
fn submit(dir: &Path, name: &str, vars: &[(&str, &Path)]) -> (String, String) {
    let t = Instant::now();
    let out = sbatch_cmd(dir, name, &job_script(name), vars, true)
        .output()
        .expect("sbatch");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let log = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default();
    assert!(
        out.status.success(),
        "job {name} ({id}) failed: {}\n{}\n--- job output ---\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "job {name} ({id}): {:.1} s\n{log}",
        t.elapsed().as_secs_f64()
    );
    (id, log)
}

/// The value after `key: ` on the line starting with it.
fn field<'a>(log: &'a str, key: &str) -> &'a str {
    let p = format!("{key}: ");
    log.lines()
        .find_map(|l| l.strip_prefix(&p))
        .unwrap_or_else(|| panic!("no {key:?} line in the job output:\n{log}"))
        .trim()
}

fn is_mounted_under(dir: &Path) -> bool {
    let want = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .any(|m| m == want || m.starts_with(&format!("{want}/")))
}

// ---------------------------------------------------------------- dataset

/// A dataset-like tree: 300 files of random sizes (a few over a block, some
/// empty) in three levels of directories, plus what `find -type f` skips.
fn dataset_tree(root: &Path) {
    let mut x: u64 = 0x5EED_0011;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..300u64 {
        let r = next();
        let dir = root.join(format!(
            "split{}/class{:02}/part{}",
            r % 3,
            (r >> 8) % 12,
            (r >> 16) % 2
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let size = match i % 50 {
            0 => 0,
            1 => 200_000 + (next() % 1_000_000) as usize,
            _ => (next() % 40_000) as usize,
        };
        std::fs::write(
            dir.join(format!("sample-{i:04}.bin")),
            bytes(i, size, i % 3 == 0),
        )
        .unwrap();
    }
    std::fs::write(root.join("split0/README with space.txt"), "names\n").unwrap();
    std::fs::write(root.join("split1/étiquettes.csv"), "a,b\n1,2\n").unwrap();
    std::fs::create_dir_all(root.join("split2/empty-dir")).unwrap();
    std::os::unix::fs::symlink("README with space.txt", root.join("split0/latest")).unwrap();
}

/// What the dataset job prints for `root`, computed independently of the
/// job's coreutils pipeline: Python's hashlib over the files in byte order
/// of `./path`, in `sha256sum`'s line format.
fn expected_tree_digest(root: &Path) -> (usize, String) {
    let py = r#"
import hashlib, os, sys
root = sys.argv[1]
paths = []
for d, dirs, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        if os.path.isfile(p) and not os.path.islink(p):
            paths.append(os.path.relpath(p, root))
lines = b""
for rel in sorted(paths, key=os.fsencode):
    with open(os.path.join(root, rel), "rb") as fh:
        h = hashlib.sha256(fh.read()).hexdigest()
    lines += h.encode() + b"  ./" + os.fsencode(rel) + b"\n"
print(len(paths), hashlib.sha256(lines).hexdigest())
"#;
    let out = run(Command::new(python3()).arg("-c").arg(py).arg(root));
    let (n, h) = out.trim().split_once(' ').unwrap();
    (n.parse().unwrap(), h.to_string())
}

fn dataset_job(dir: &Path, image: &Path, src: &Path) {
    dataset_job_named(dir, "dataset", image, src);
}

/// A job of docs/HPC.md that mounts IMAGE on a job-id path and prints the
/// tree's file count and digest: `dataset`, or `per-node` (one `packfs
/// run` per node under `srun`; one node here).
fn dataset_job_named(dir: &Path, name: &str, image: &Path, src: &Path) {
    let (files, digest) = expected_tree_digest(src);
    let (id, log) = submit(dir, name, &[("IMAGE", image)]);
    assert_eq!(field(&log, "files"), files.to_string(), "{log}");
    assert_eq!(field(&log, "sha256"), digest, "{log}");
    let job_tmp = PathBuf::from(format!("/tmp/{id}"));
    assert!(
        !is_mounted_under(&job_tmp),
        "{} still mounted",
        job_tmp.display()
    );
    assert!(
        !job_tmp.exists(),
        "{} left behind: packfs run removes the mountpoint it created",
        job_tmp.display()
    );
}

/// `scancel` of a job whose image is mounted: Slurm sends SIGTERM to the
/// job's processes; `packfs run` must unmount and remove its mountpoint
/// before the SIGKILL that follows KillWait (30 s).
fn cancelled_job(dir: &Path, image: &Path) {
    let script = "#!/bin/bash\nset -euo pipefail\n\
                  packfs run \"$IMAGE:/tmp/$SLURM_JOB_ID/data\" -- sleep 300\n";
    let out = sbatch_cmd(dir, "cancelled", script, &[("IMAGE", image)], false)
        .output()
        .expect("sbatch");
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mnt = PathBuf::from(format!("/tmp/{id}/data"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !is_mounted_under(&mnt) {
        assert!(
            Instant::now() < deadline,
            "job {id} did not mount {} in 30 s:\n{}",
            mnt.display(),
            std::fs::read_to_string(dir.join("cancelled.out")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    run(Command::new("scancel").arg(&id));
    loop {
        let q = run(Command::new("squeue").args(["-h", "-j", &id, "-o", "%T"]));
        if q.trim().is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "job {id} still {q}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t.elapsed();
    eprintln!(
        "job cancelled ({id}): gone {:.1} s after scancel",
        took.as_secs_f64()
    );
    // The job leaves squeue when the processes Slurm tracks have ended.
    // This node tracks them by parentage (proctrack/linuxproc, no
    // cgroups): the batch shell dies of the SIGTERM at once, and `packfs
    // run`, orphaned, is no longer tracked while it unmounts and removes
    // its directories. So its cleanup is awaited, within the same bound.
    let job_tmp = mnt.parent().unwrap();
    while (is_mounted_under(job_tmp) || job_tmp.exists()) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !is_mounted_under(job_tmp),
        "{} still mounted 20 s after scancel",
        mnt.display()
    );
    assert!(
        !job_tmp.exists(),
        "{} left behind 20 s after scancel",
        job_tmp.display()
    );
    assert!(
        took < Duration::from_secs(20),
        "the job took {took:?} to end after scancel: packfs run did not act on SIGTERM, \
         Slurm had to SIGKILL it"
    );
}

// ---------------------------------------------------------------- shards

/// The doc's job array packs `src` as four shards, one per task (at most
/// two at once on this node); the training job mounts the manifest the last
/// task wrote and must see the source tree. The shards must be the bytes one
/// process writes for the same split.
fn shard_jobs(dir: &Path, src: &Path) {
    let out = dir.join("shards-out");
    let vars = [
        ("SRC", src),
        ("OUT", out.as_path()),
        ("SHARDS", Path::new("4")),
    ];
    array_then_train(dir, "pack-shards", &vars, &out, 4, src, src);
}

/// Submits the doc's job array `job` (`vars` exported, one task per shard
/// of `n`, writing to `out`), checks that its images and manifest are the
/// bytes one process writes from `pack_arg` with `--shards n`, then runs
/// the `train-shards` job on the manifest, which must see the files of the
/// tree `src` with their contents.
fn array_then_train(
    dir: &Path,
    job: &str,
    vars: &[(&str, &Path)],
    out: &Path,
    n: u32,
    pack_arg: &Path,
    src: &Path,
) {
    let t = Instant::now();
    let res = sbatch_cmd_with(
        dir,
        job,
        &job_script(job),
        vars,
        true,
        &[
            &format!("--array=0-{}", n - 1),
            "--cpus-per-task=1",
            &format!("--output={}", dir.join(format!("{job}-%a.out")).display()),
        ],
    )
    .output()
    .expect("sbatch");
    let logs: String = (0..n)
        .map(|a| std::fs::read_to_string(dir.join(format!("{job}-{a}.out"))).unwrap_or_default())
        .collect();
    assert!(
        res.status.success(),
        "job array failed: {}\n{}\n{logs}",
        res.status,
        String::from_utf8_lossy(&res.stderr)
    );
    eprintln!("job array {job}: {:.1} s", t.elapsed().as_secs_f64());
    let manifest = out.join("train.manifest.json");
    assert!(manifest.is_file(), "no manifest after the array:\n{logs}");

    // One process, same inputs: the same bytes, whatever order the tasks ran in.
    let local = dir.join(format!("{job}-local"));
    std::fs::create_dir(&local).unwrap();
    run(Command::new(packfs_bin())
        .env("SOURCE_DATE_EPOCH", "0")
        .arg("pack")
        .arg(pack_arg)
        .args(["--shards", &n.to_string(), "-q", "-o"])
        .arg(local.join("train-{shard}.sqfs")));
    let names = (0..n)
        .map(|k| format!("train-{k}.sqfs"))
        .chain(["train.manifest.json".to_string()]);
    for name in names {
        let (a, b) = (
            std::fs::read(out.join(&name)),
            std::fs::read(local.join(&name)),
        );
        assert!(
            a.as_ref().ok() == b.as_ref().ok() && a.is_ok(),
            "{name}: the array's output differs from one process's"
        );
    }

    let (files, digest) = expected_tree_digest(src);
    let (id, log) = submit(dir, "train-shards", &[("MANIFEST", &manifest)]);
    assert_eq!(field(&log, "files"), files.to_string(), "{log}");
    assert_eq!(field(&log, "sha256"), digest, "{log}");
    assert!(!PathBuf::from(format!("/tmp/{id}")).exists());
}

/// The doc's job array packs WebDataset-style tar shards of `src` (six
/// tars of its files, in path order) as three images, one per task, each
/// task reading only its two tars; the result is the bytes one process
/// writes, and the training job mounting its manifest sees the files of
/// `src` with their contents.
fn archive_shard_jobs(dir: &Path, src: &Path) {
    let tars = dir.join("tars");
    std::fs::create_dir(&tars).unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                files.push(p.strip_prefix(src).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    let per = files.len().div_ceil(6);
    for (i, group) in files.chunks(per).enumerate() {
        run(Command::new("tar")
            .arg("-cf")
            .arg(tars.join(format!("train-{i:06}.tar")))
            .arg("-C")
            .arg(src)
            .args(group));
    }
    let pattern = tars.join("train-{000000..000005}.tar");
    let out = dir.join("archive-shards-out");
    let vars = [
        ("TARS", pattern.as_path()),
        ("OUT", out.as_path()),
        ("SHARDS", Path::new("3")),
    ];
    array_then_train(dir, "pack-archive-shards", &vars, &out, 3, &pattern, src);
}

// ---------------------------------------------------------------- venv

fn python3() -> &'static str {
    // Debian's interpreter (python3-venv), the same on CI and here, rather
    // than whatever python3 comes first on PATH.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

const WHEEL: &str = "hello_packfs-1.2.3-py3-none-any.whl";

/// Writes a pure-Python wheel with a console script `hello-packfs` (built
/// here with zipfile: building one from source would need `wheel`, which a
/// fresh venv lacks offline); pip installs it as it installs any wheel.
fn write_wheel(dir: &Path) -> PathBuf {
    let py = r#"
import base64, hashlib, sys, zipfile
files = {
    "hello_packfs/__init__.py":
        '__version__ = "1.2.3"\n\n'
        'def main():\n'
        '    import sys\n'
        '    print("hello-packfs", __version__, "prefix=" + sys.prefix)\n',
    "hello_packfs-1.2.3.dist-info/METADATA":
        "Metadata-Version: 2.1\nName: hello-packfs\nVersion: 1.2.3\n",
    "hello_packfs-1.2.3.dist-info/WHEEL":
        "Wheel-Version: 1.0\nGenerator: packfs-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "hello_packfs-1.2.3.dist-info/entry_points.txt":
        "[console_scripts]\nhello-packfs = hello_packfs:main\n",
}
record = "hello_packfs-1.2.3.dist-info/RECORD"
rows = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rows.append(f"{record},,")
    z.writestr(record, "\n".join(rows) + "\n")
"#;
    let wheel = dir.join(WHEEL);
    run(Command::new(python3()).arg("-c").arg(py).arg(&wheel));
    wheel
}

/// The job's program: what it prints is what the test checks.
const TRAIN_PY: &str = r#"import os, subprocess, sys
import importlib.util
import hello_packfs as m

def run(*argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:  # e.g. a shebang naming an interpreter that is not there
        return f"FAILED: {e}"
    if p.returncode != 0:
        return f"FAILED (status {p.returncode}): {p.stderr.strip()}"
    return p.stdout.strip()

print("prefix:", sys.prefix)
print("executable:", sys.executable)
print("virtual_env:", os.environ.get("VIRTUAL_ENV", "-"))
print("module:", m.__file__)
# The .pyc is valid for its source as the importer checks it (timestamp
# pycs: mtime and size recorded in the header; hash-based: taken as is).
st = os.stat(m.__file__)
try:
    with open(m.__cached__, "rb") as f:
        head = f.read(16)
except FileNotFoundError:
    head = b""
flags = int.from_bytes(head[4:8], "little")
valid = len(head) == 16 and head[:4] == importlib.util.MAGIC_NUMBER and (
    flags != 0
    or (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF))
print("pyc:", m.__cached__, "valid" if valid else "INVALID" if head else "missing")
print("hello:", run(os.path.join(sys.prefix, "bin", "hello-packfs")))
print("pip:", run(os.path.join(sys.prefix, "bin", "pip"), "--version"))
"#;

/// A venv with pip and `hello-packfs`, no `.pyc` for the latter (so only
/// `--compile` can provide one).
fn build_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("build/venv");
    std::fs::create_dir_all(venv.parent().unwrap()).unwrap();
    run(Command::new(python3()).args(["-m", "venv"]).arg(&venv));
    let wheel = write_wheel(dir);
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--no-index", "--no-compile"])
        .arg(&wheel)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"));
    venv
}

fn venv_job(dir: &Path, name: &str, image: &Path, mount_at: &Path, activated: bool) {
    let m = mount_at.to_str().unwrap();
    let parent = mount_at.parent().unwrap();
    let parent_existed = parent.exists();
    let (_, log) = submit(dir, name, &[("VENV_IMAGE", image)]);
    assert_eq!(field(&log, "prefix"), m, "{log}");
    assert_eq!(
        field(&log, "executable"),
        format!("{m}/bin/python"),
        "{log}"
    );
    assert_eq!(
        field(&log, "virtual_env"),
        if activated { m } else { "-" },
        "{log}"
    );
    let module = field(&log, "module");
    assert!(
        module.starts_with(&format!("{m}/lib/")) && module.ends_with("hello_packfs/__init__.py"),
        "{log}"
    );
    let pyc = field(&log, "pyc");
    assert!(
        pyc.starts_with(&format!("{m}/lib/")) && pyc.ends_with(" valid"),
        "no valid .pyc in the image (pack --compile): {log}"
    );
    assert_eq!(
        field(&log, "hello"),
        format!("hello-packfs 1.2.3 prefix={m}"),
        "the console script's shebang must name the mount path: {log}"
    );
    let pip = field(&log, "pip");
    assert!(
        pip.starts_with("pip ") && pip.contains(&format!(" from {m}/lib/")),
        "bin/pip must run the mounted venv: {log}"
    );
    assert!(!is_mounted_under(mount_at), "{m} still mounted");
    assert!(!mount_at.exists(), "{m} left behind");
    if !parent_existed {
        assert!(!parent.exists(), "{} left behind", parent.display());
    }
}

#[test]
fn hpc_doc_job_scripts_run_under_slurm() {
    if !require_root("Slurm jobs that mount with FUSE") {
        return;
    }
    let t0 = Instant::now();
    let t = scratch();
    let dir = t.path();

    // The inputs, before Slurm starts (the slow part is python -m venv).
    let data = dir.join("data");
    dataset_tree(&data);
    let data_img = dir.join("train.sqfs");
    pack(&data, &data_img, &[]);

    let venv = build_venv(dir);
    let mount_at = PathBuf::from(format!("/tmp/{}/venv", user()));
    assert!(
        !mount_at.exists(),
        "{} exists; the venv jobs mount there",
        mount_at.display()
    );
    let venv_img = dir.join("proj-venv.sqfs");
    // As docs/HPC.md packs it: rewritten for the path the jobs mount it at,
    // byte-compiled.
    pack(
        &venv,
        &venv_img,
        &["--mount-at", mount_at.to_str().unwrap(), "--compile"],
    );
    // Hide the build path: a shebang, activate script or config still
    // naming it now fails instead of quietly running the source venv.
    std::fs::rename(&venv, dir.join("build/venv.moved")).unwrap();
    std::fs::write(dir.join("train.py"), TRAIN_PY).unwrap();
    eprintln!("inputs ready in {:.1} s", t0.elapsed().as_secs_f64());

    let _slurm = Slurm::start();
    let t1 = Instant::now();
    std::thread::scope(|s| {
        // The two venv jobs mount the same path, so one after the other;
        // the dataset jobs use job-id paths and run beside them.
        let venv_jobs = s.spawn(|| {
            venv_job(dir, "venv", &venv_img, &mount_at, false);
            venv_job(dir, "venv-activate", &venv_img, &mount_at, true);
        });
        dataset_job(dir, &data_img, &data);
        dataset_job_named(dir, "per-node", &data_img, &data);
        cancelled_job(dir, &data_img);
        shard_jobs(dir, &data);
        archive_shard_jobs(dir, &data);
        venv_jobs.join().unwrap();
    });
    eprintln!(
        "jobs done in {:.1} s (total {:.1} s)",
        t1.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
