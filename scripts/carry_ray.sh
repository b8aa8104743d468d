#!/usr/bin/env bash
# Ray on the GPU machine, which reaches no package index. Its wheel (cp312, manylinux x86_64: 79 MB for
# ray 2.60) is larger than one device call may carry (the working tree and what it carries: 64 MiB), so
# it travels in parts over consecutive calls to one held machine, which keeps /tmp between calls.
#
#   bash scripts/carry_ray.sh pack      here, in the checkout the device tool sends: download Ray and the
#       wheels it needs that the GPU image lacks, split what one call cannot carry (split -b), and write
#       .raycarry/1, .raycarry/2, ... (one folder per call, each with the whole sha256 manifest), ignored
#       through .git/info/exclude; it prints which folder each call carries.
#   bash scripts/carry_ray.sh install   there, in each call that carries .raycarry/K: keep the parts carried
#       so far under /tmp/raycarry (each checked against the manifest), and once every part is there join
#       them, check each wheel's sha256 and install them into /tmp/site (pip --no-index --no-deps --target).
#       Exit 0: installed (now, or by an earlier call); 3: parts still to come (it names the folders); 1: a
#       file whose sha256 is wrong, or no manifest. Repeating a call is harmless.
#
# Settings (environment): RAY_VERSION (2.60.0), CARRY_DIR (.raycarry), STORE (/tmp/raycarry), SITE (/tmp/site),
# PART_MB (default: what the working tree leaves of a call's 64 MiB, parts of equal size), IMAGE_PACKAGES (a file
# naming the image's packages, as KINDS.md's "Python packages already there" does; default that file),
# WHEELS (pack these wheel files instead of downloading: tests), WHEEL_CACHE (/tmp/carry_ray_wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
RAY_VERSION=${RAY_VERSION:-2.60.0}
CARRY_DIR=${CARRY_DIR:-.raycarry}
STORE=${STORE:-/tmp/raycarry}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
LIMIT_MIB=64      # the device call's working tree and carried paths, together
HEADROOM_MIB=2    # for what else a call carries (.debs: the judge's bubblewrap) and files made meanwhile

sha() { sha256sum "$1" | cut -d' ' -f1; }

# Ray's requirements (its METADATA, extras left out, markers for CPython 3.12 on Linux x86_64) that the image
# lacks, and theirs in turn, each downloaded as a wheel for that platform into $1. Prints the files.
download_deps() {
  "$PY" - "$1" "$2" "${IMAGE_PACKAGES:-/work/.library/device/KINDS.md}" <<'PY'
import pathlib, re, subprocess, sys, zipfile
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

dest, ray_wheel, listing = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
if not listing.is_file():
    sys.exit(f"IMAGE_PACKAGES: {listing} does not exist: name a file listing the GPU image's Python packages")
text = listing.read_text()
found = re.search(r"\bPackages: (.*)$", text, re.M)   # KINDS.md's one line; else one name a line
names = found.group(1).rstrip(".").split(", ") if found else text.split()
present = {canonicalize_name(n) for n in names}
env = dict(default_environment(), python_version="3.12", python_full_version="3.12.3", sys_platform="linux",
           platform_system="Linux", platform_machine="x86_64", implementation_name="cpython", os_name="posix",
           platform_python_implementation="CPython", extra="")
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"] + [
    a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64", "any")
    for a in ("--platform", p)]


def requires(wheel: pathlib.Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:   # the wheel's own dist-info, not a vendored package's
        meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        lines = z.read(meta).decode().splitlines()
    reqs = [Requirement(ln.split(":", 1)[1].strip()) for ln in lines if ln.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


todo, seen, files = [pathlib.Path(ray_wheel)], set(present), []
while todo:
    for r in requires(todo.pop()):
        name = canonicalize_name(r.name)
        if name in seen:
            continue
        seen.add(name)
        before = set(dest.glob("*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(dest),
                        f"{r.name}{r.specifier}"], check=True)
        got = (set(dest.glob("*.whl")) - before) or {w for w in dest.glob("*.whl")
                                                     if canonicalize_name(w.name.split("-")[0]) == name}
        todo += got
        files += got
print("\n".join(str(f) for f in files))
PY
}

# The bytes the device tool sends besides the carried folder: tracked files and untracked ones not ignored.
tree_bytes() {
  git ls-files -z -co --exclude-standard 2>/dev/null | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

pack() {
  local wheels=() deps=() tmp
  if [ -n "${WHEELS:-}" ]; then
    read -r -a wheels <<<"$WHEELS"
    deps=("${wheels[@]:1}")
  else
    tmp=${WHEEL_CACHE:-/tmp/carry_ray_wheels}
    mkdir -p "$tmp/ray" "$tmp/deps"
    rm -f "$tmp/deps"/*.whl
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$tmp/ray" "ray==$RAY_VERSION"
    wheels=("$(ls "$tmp"/ray/ray-"$RAY_VERSION"-cp312-*.whl | head -1)")
    local listed
    listed=$(download_deps "$tmp/deps" "${wheels[0]}")
    [ -z "$listed" ] || mapfile -t deps <<<"$listed"
    wheels+=("${deps[@]}")
  fi
  local main=${wheels[0]} name size dep_bytes=0 room part_mib parts
  name=$(basename "$main")
  size=$(stat -c %s "$main")
  for d in "${deps[@]}"; do dep_bytes=$((dep_bytes + $(stat -c %s "$d"))); done
  if [ -n "${PART_MB:-}" ]; then
    part_mib=$PART_MB
  else  # as few calls as the tree leaves room for, the parts of equal size (the last call also takes the deps)
    room=$(( LIMIT_MIB * 1048576 - $(tree_bytes) - HEADROOM_MIB * 1048576 ))
    [ "$room" -gt $((4 * 1048576)) ] || { echo "carry_ray: the working tree leaves no room in a call's $LIMIT_MIB MiB" >&2; exit 1; }
    parts=$(( (size + dep_bytes + room - 1) / room ))
    part_mib=$(( (size + parts * 1048576 - 1) / (parts * 1048576) ))
  fi
  rm -rf "$CARRY_DIR"/[0-9]* "$CARRY_DIR/.work"   # an earlier pack's parts; anything else there stays (resume.json)
  mkdir -p "$CARRY_DIR/.work"
  split -b "${part_mib}M" -d -a 2 "$main" "$CARRY_DIR/.work/$name.part-"
  local k=0 p manifest=$CARRY_DIR/.work/SHA256SUMS plan=$CARRY_DIR/.work/CALLS
  : >"$manifest"; : >"$plan"
  for w in "${wheels[@]}"; do echo "$(sha "$w")  $(basename "$w")" >>"$manifest"; done
  for p in "$CARRY_DIR"/.work/"$name".part-*; do
    k=$((k + 1))
    mkdir -p "$CARRY_DIR/$k"
    mv "$p" "$CARRY_DIR/$k/"
    echo "$(sha "$CARRY_DIR/$k/$(basename "$p")")  $(basename "$p")" >>"$manifest"
    echo "$k $(basename "$p")" >>"$plan"
  done
  for d in "${deps[@]}"; do cp "$d" "$CARRY_DIR/$k/"; echo "$k $(basename "$d")" >>"$plan"; done
  for f in "$CARRY_DIR"/[0-9]*; do cp "$manifest" "$plan" "$f/"; done
  rm -rf "$CARRY_DIR/.work"
  local exclude
  if [[ $CARRY_DIR != /* ]] && exclude=$(git rev-parse --git-path info/exclude 2>/dev/null); then
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "/$CARRY_DIR/" "$exclude" 2>/dev/null || echo "/$CARRY_DIR/" >>"$exclude"
  fi
  echo "carry_ray: $name ($((size / 1048576)) MiB) in $k part(s) of at most $part_mib MiB, ${#deps[@]} more wheel(s) in the last:"
  for f in "$CARRY_DIR"/[0-9]*; do
    echo "  call $(basename "$f"): carry [\"$f\"] ($(du -sm "$f" | cut -f1) MiB; the tree $(( $(tree_bytes) / 1048576 )) MiB)"
  done
}

install() {
  mkdir -p "$STORE"
  local f folder name want have got
  for folder in "$CARRY_DIR"/[0-9]*/; do  # what this call carried: kept, each file checked as it is kept
    [ -f "$folder/SHA256SUMS" ] || continue
    cp "$folder/SHA256SUMS" "$folder/CALLS" "$STORE/"
    while read -r want name; do
      [ -f "$folder/$name" ] || continue
      if [ -f "$STORE/$name" ] && [ "$(sha "$STORE/$name")" = "$want" ]; then continue; fi
      got=$(sha "$folder/$name")
      [ "$got" = "$want" ] || { echo "carry_ray: $folder$name has sha256 $got, the manifest says $want" >&2; exit 1; }
      cp "$folder/$name" "$STORE/$name.tmp" && mv "$STORE/$name.tmp" "$STORE/$name"
      echo "carry_ray: kept $name under $STORE"
    done <"$folder/SHA256SUMS"
  done
  [ -f "$STORE/SHA256SUMS" ] || { echo "carry_ray: nothing carried yet (no manifest in $CARRY_DIR/*/ or $STORE): carry $CARRY_DIR/1" >&2; exit 1; }
  local marker="$SITE/.carry_ray-$(sha "$STORE/SHA256SUMS")"
  if [ -f "$marker" ]; then echo "carry_ray: installed already in $SITE"; return 0; fi
  local missing=() wheels=()
  while read -r want name; do  # the whole wheels: joined from their parts where they came in parts
    [[ $name == *.part-* ]] && continue
    wheels+=("$STORE/$name")
    [ -f "$STORE/$name" ] && [ "$(sha "$STORE/$name")" = "$want" ] && continue
    local parts=() p
    while read -r _ p; do
      [[ $p == "$name".part-* ]] || continue
      if [ -f "$STORE/$p" ]; then parts+=("$STORE/$p"); else missing+=("$CARRY_DIR/$(awk -v p="$p" '$2 == p {print $1}' "$STORE/CALLS")/$p"); fi
    done <"$STORE/SHA256SUMS"
    if [ ${#parts[@]} -gt 0 ] && [ ${#missing[@]} -eq 0 ]; then
      cat "${parts[@]}" >"$STORE/$name.tmp"
      got=$(sha "$STORE/$name.tmp")
      [ "$got" = "$want" ] || { rm -f "$STORE/$name.tmp"; echo "carry_ray: $name joined from ${#parts[@]} parts has sha256 $got, the manifest says $want" >&2; exit 1; }
      mv "$STORE/$name.tmp" "$STORE/$name"
      echo "carry_ray: joined $name from ${#parts[@]} parts; sha256 checked"
    elif [ ${#parts[@]} -eq 0 ] && ! grep -q " $name.part-" "$STORE/SHA256SUMS"; then
      missing+=("$CARRY_DIR/$(awk -v p="$name" '$2 == p {print $1}' "$STORE/CALLS")/$name")
    fi
  done <"$STORE/SHA256SUMS"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "carry_ray: still to come (carry these folders in the next calls): $(printf '%s\n' "${missing[@]}" | xargs -n1 dirname | sort -u | xargs)"
    exit 3
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
  touch "$marker"
  echo "carry_ray: installed $(printf '%s\n' "${wheels[@]}" | xargs -n1 basename | xargs) into $SITE (PYTHONPATH=$SITE)"
}

case ${1:-} in
  pack) pack ;;
  install) install ;;
  *) echo "usage: bash scripts/carry_ray.sh pack|install" >&2; exit 2 ;;
esac
