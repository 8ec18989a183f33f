#!/bin/sh
# SPDX-License-Identifier: MIT
# opts-friction: the friction items of issue #15 on the placefs command line,
# against live mounts:
#   - GNU long options (--buffer-size=8M, --ring-size 16M) and -o names with
#     dashes are usage errors (exit 2) naming the -o spelling, not FUSE
#     failures (exit 10), and nothing is mounted; the README shows placefs
#     with -o options it describes, --buffer-size only beside placefs-plan;
#   - KB/MB/GB/TB are powers of 1000 and K/M/G/T powers of 1024 in every
#     size option and in INSTANTTENSOR_BUFFER_SIZE; a bad suffix lists the
#     accepted ones;
#   - placefs --help gives one default per option (max_threads once);
#   - the staging limit of a mount shows in /proc/mounts, mountinfo and findmnt
#     (the fsname), as the plan of the mount has it.
. "$(dirname "$0")/lib.sh"
require_fuse

cd "$TMP" || fail "cd $TMP"
tmo 20 "$MKCKPT" -q --seed 5 --tensor 'small:F32:1000' --tensor 'mid:U8:8000000' \
	--tensor 'big:U8:8388608' ckpt.safetensors || fail "placefs-mkckpt failed"
MP=$TMP/mnt
mkdir -p "$MP"

# refused STATUS TEXT ARGS...: placefs ARGS exits STATUS with TEXT on stderr, mounting nothing.
refused() {
	local want=$1 text=$2 st=0
	shift 2
	tmo 20 "$PLACEFS" "$@" >out 2>err || st=$?
	[ "$st" -eq "$want" ] || fail "placefs $*: exit $st, want $want: $(cat err)"
	grep -qF -- "$text" err || fail "placefs $*: stderr lacks '$text': $(cat err)"
	[ "$(wc -l <err)" -eq 1 ] || fail "placefs $*: want one line on stderr: $(cat err)"
	! is_mounted "$MP" || fail "placefs $* mounted something"
}

# ---- long options and dashes: usage errors naming the -o spelling ------------------
refused 2 "use -o buffer_size=8M" --buffer-size=8M ckpt.safetensors "$MP"
refused 2 "placefs takes its options as -o name=value" --buffer-size=8M ckpt.safetensors "$MP"
refused 2 "use -o buffer_size=VALUE" --buffer-size 8M ckpt.safetensors "$MP"
refused 2 "use -o ring_size=16M" ckpt.safetensors "$MP" --ring-size=16M
refused 2 "use -o ring_size=VALUE" --ring-size 16M ckpt.safetensors "$MP"
refused 2 "use -o noprefetch" --noprefetch ckpt.safetensors "$MP"
refused 2 "use -o buffer_size=8M" -o buffer-size=8M ckpt.safetensors "$MP"
refused 2 "use -o max_threads=4" -o ro,max-threads=4 ckpt.safetensors "$MP"
refused 2 "unknown option '--no-such-thing'" --no-such-thing ckpt.safetensors "$MP"
# The README shows placefs with the options it takes: no long option beside
# placefs, --buffer-size/--ring-size only beside placefs-plan (or where it says
# they are refused), and every -o NAME one that placefs --help describes.
tmo 20 "$PYTHON" - "$top_srcdir/README.md" "$PLACEFS" "$PLAN" <<'EOF' || fail "README.md shows options placefs refuses"
import re, subprocess, sys
readme, placefs, plan = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(readme).read().split("\n")
help_ = subprocess.run([placefs, "--help"], capture_output=True, text=True).stdout
names = set(re.findall(r"^ *-o ([a-z_]+)", help_, re.M))
plan_help = subprocess.run([plan, "--help"], capture_output=True, text=True).stdout
# placefs-plan's long options that placefs spells -o name_with_underscores.
longs = {o for o in re.findall(r"(--[a-z][a-z-]+)", plan_help)
         if "-" in o[2:] and o[2:].replace("-", "_") in names}
bad = []
in_plan_cmd = False
for i, line in enumerate(text, 1):
    s = line.strip()
    # A command line of placefs-plan (another tool's), or its synopsis' continuation.
    if re.match(r"(\$ )?(\S+=\S+ )*placefs-[a-z]+\b", s):
        in_plan_cmd = True
    elif not (in_plan_cmd and s.startswith("[")):
        in_plan_cmd = False
    # placefs itself followed by a long option it refuses.
    for m in re.finditer(r"(?<![\w-])placefs +\[?(--[a-z][a-z-]*)", line):
        if m.group(1) not in ("--help", "--version"):
            bad.append("%d: placefs %s" % (i, m.group(1)))
    # placefs-plan's long options only beside placefs-plan (or where the refusal is told).
    for m in re.finditer(r"(?<![\w-])(--[a-z][a-z-]+)", line):
        opt = m.group(1)
        if opt not in longs or in_plan_cmd or "usage error" in line:
            continue
        spans = [b for b in re.findall(r"`([^`]*)`", line) if opt in b]
        if spans and all(b.startswith("placefs-plan ") for b in spans):
            continue
        bad.append("%d: %s not beside placefs-plan: %s" % (i, opt, s))
    # -o NAME: an option placefs --help describes.
    for m in re.finditer(r"(?<![\w-])-o ([a-z_]+)(?=[]=` ,.)]|$)", line):
        if m.group(1) not in names and m.group(1) not in ("name", "allow_other", "debug"):
            bad.append("%d: -o %s is not a placefs option" % (i, m.group(1)))
for b in bad:
    print("FAIL: %s: %s" % (readme, b))
sys.exit(1 if bad else 0)
EOF
# libfuse's own long options still work.
tmo 10 "$PLACEFS" --version >out 2>err || fail "placefs --version: $(cat err)"
grep -q '^placefs ' out || fail "placefs --version: $(cat out)"

# ---- one default per option in --help -----------------------------------------------
tmo 10 "$PLACEFS" --help >help 2>err || fail "placefs --help: $(cat err)"
[ "$(grep -c 'max_threads' help)" -eq 1 ] || fail "--help names max_threads more than once: $(grep max_threads help)"
grep -q 'max_threads=N .*(default: 16, at most 1024)' help || fail "--help: max_threads line"
for opt in $(sed -n 's/^ *-o \([a-z_]*\).*/\1/p' help | sort | uniq -d); do
	fail "--help describes -o $opt twice"
done
grep -q 'KB, MB, GB, TB' help || fail "--help does not describe the size suffixes"
grep -q '^FUSE options:$' help || fail "--help: no FUSE options section"
grep -q 'allow_other' help || fail "--help lost libfuse's mount options"

# ---- the size grammar: SI suffixes everywhere, and the list in the error --------------
refused 4 'unknown suffix "QB"' -o buffer_size=8QB ckpt.safetensors "$MP"
refused 4 'K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)' \
	-o buffer_size=8QB ckpt.safetensors "$MP"
refused 2 'KB, MB, GB, TB (powers of 1000)' -o ring_size=1Mb ckpt.safetensors "$MP"
refused 2 '-o host_buffer="64mb"' -o host_buffer=64mb ckpt.safetensors "$MP"
export INSTANTTENSOR_BUFFER_SIZE=5gb
refused 4 'INSTANTTENSOR_BUFFER_SIZE="5gb": unknown suffix' ckpt.safetensors "$MP"
unset INSTANTTENSOR_BUFFER_SIZE

# placement MNT NAME: gpu or cpu, from the mount's by-placement views (no getfattr needed).
placement() {
	if [ -L "$1/.placefs/by-placement/gpu/$2" ]; then
		echo gpu
	elif [ -L "$1/.placefs/by-placement/cpu/$2" ]; then
		echo cpu
	fi
}
# fsname MNT: the mount's SOURCE as findmnt shows it.
fsname() {
	findmnt -n -o SOURCE --mountpoint "$1"
}

# 8MB = 8000000 bytes: mid (8000000) is gpu, big (8 MiB) cpu; 8M would take both.
mount_fs ckpt.safetensors "$MP" -o buffer_size=8MB,device=none,ring_size=16MB,host_buffer=1MB,readahead=2MB
[ "$(placement "$MP" mid)" = gpu ] || fail "8MB: mid (8000000 bytes) should be gpu"
[ "$(placement "$MP" big)" = cpu ] || fail "8MB: big (8 MiB) should be cpu"
grep -q '^staging limit: 8000000 bytes ' "$MP/.placefs/plan" || fail "plan: $(grep limit "$MP/.placefs/plan")"
[ "$(fsname "$MP")" = "placefs:ckpt.safetensors,buffer_size=8MB" ] ||
	fail "findmnt SOURCE: $(fsname "$MP")"
grep -qF "placefs:ckpt.safetensors,buffer_size=8MB $MP fuse.placefs " /proc/mounts ||
	fail "/proc/mounts: $(grep " $MP " /proc/mounts)"
mount_line "$MP" | grep -qF ' - fuse.placefs placefs:ckpt.safetensors,buffer_size=8MB ' ||
	fail "mountinfo: $(mount_line "$MP")"
umount_fs "$MP"

mount_fs ckpt.safetensors "$MP" -o buffer_size=8M,device=none
[ "$(placement "$MP" big)" = gpu ] || fail "8M: big (8 MiB) should be gpu"
[ "$(fsname "$MP")" = "placefs:ckpt.safetensors,buffer_size=8M" ] || fail "8M: $(fsname "$MP")"
umount_fs "$MP"

# From the environment, as Hugging Face writes max_shard_size; exact bytes stay bytes.
export INSTANTTENSOR_BUFFER_SIZE=5GB
mount_fs ckpt.safetensors "$MP" -o device=none
unset INSTANTTENSOR_BUFFER_SIZE
grep -q '^staging limit: 5000000000 bytes ' "$MP/.placefs/plan" || fail "5GB: plan"
[ "$(fsname "$MP")" = "placefs:ckpt.safetensors,buffer_size=5GB" ] || fail "5GB: $(fsname "$MP")"
umount_fs "$MP"
mount_fs ckpt.safetensors "$MP" -o buffer_size=7999999,device=none
[ "$(placement "$MP" mid)" = cpu ] || fail "7999999: mid should be cpu"
[ "$(fsname "$MP")" = "placefs:ckpt.safetensors,buffer_size=7999999" ] || fail "7999999: $(fsname "$MP")"
umount_fs "$MP"

# No limit, and prefixes (counted: the plan has them).
mount_fs ckpt.safetensors "$MP" -o device=none,prefix=s,prefix=m
[ "$(fsname "$MP")" = "placefs:ckpt.safetensors,buffer_size=none,prefixes=2" ] ||
	fail "no limit, two prefixes: $(fsname "$MP")"
[ "$(ls "$MP" | wc -l)" -eq 2 ] || fail "two prefixes: $(ls "$MP")"
umount_fs "$MP"

# A source with a space: the kernel escapes it in /proc/mounts, findmnt decodes it.
mkdir -p "src dir"
cp ckpt.safetensors "src dir/c.safetensors"
mount_fs "src dir/c.safetensors" "$MP" -o buffer_size=1K,device=none
[ "$(fsname "$MP")" = "placefs:src dir/c.safetensors,buffer_size=1K" ] || fail "space: $(fsname "$MP")"
grep -qF 'placefs:src\040dir/c.safetensors,buffer_size=1K ' /proc/mounts ||
	fail "space in /proc/mounts: $(grep " $MP " /proc/mounts)"
umount_fs "$MP"
note "fsname shows the limit; --long options exit 2; KB/MB/GB/TB accepted"
