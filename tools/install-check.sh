#!/bin/sh
# install-check.sh -- what a packager's PREFIX reaches, and what the
# README's commands need.  Prints "N passed, N failed".
#  * the installed unit's ExecStart and the daemon's compiled-in
#    GPU-library directory ($(PREFIX)/lib/flytuned, where `make install`
#    puts libflykernels_*) follow PREFIX, and a new PREFIX rebuilds what
#    depends on it (only those two files are built, in a temp build dir);
#  * `make install-data install-python` (part of `make install`) into a
#    temp DESTDIR, for two prefixes in one build dir: flyclient.pc names
#    the prefix and the VERSION file's version, the man pages name the
#    prefix's schemas path and that version, the schemas are there, the
#    Python client is installed under $(PREFIX)/lib/python3/dist-packages
#    and loads $(PREFIX)/lib/libflyclient.so.0;
#  * the built binaries' --version is the VERSION file's (when
#    $FLY_BUILD_DIR has them);
#  * every program the units run besides flytuned (ExecReload=/bin/kill)
#    comes from a package tools/deps.sh installs (issue 18, item 13);
#  * `tools/fly.sh run` with nvcc/hipcc but no GPU device builds GPU=none
#    and says so in one line; GPU=... forces; `test` is untouched (item 14).
set -u
cd "$(dirname "$0")/.."
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "install: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
B=$tmp/build
ver=$(cat VERSION)
unit=$B/systemd/flytuned@.service obj=$B/obj/daemon/backend.o
for pfx in /opt/flyx /usr; do
	if ! make -s BUILD="$B" PREFIX="$pfx" "$unit" "$obj" \
		> "$tmp/make.log" 2>&1; then
		bad "PREFIX=$pfx: make failed: $(tail -3 "$tmp/make.log")"
		continue
	fi
	grep -q "^ExecStart=$pfx/bin/flytuned --device %i\$" "$unit" && ok ||
		bad "PREFIX=$pfx: $(grep ExecStart "$unit")"
	# The rest of the unit is the tree's.
	[ "$(grep -vc '^ExecStart=' "$unit")" = \
	  "$(grep -vc '^ExecStart=' systemd/flytuned@.service)" ] && ok ||
		bad "PREFIX=$pfx: the unit differs beyond ExecStart"
	grep -aq "$pfx" "$obj" && ok ||
		bad "PREFIX=$pfx: backend.o does not carry the prefix"
done
# The daemon's binary searches /usr/lib/flytuned after the second build.
grep -aq '/opt/flyx' "$obj" && bad "backend.o kept the old prefix" || ok

# ---------------------------------------------------- pc, man, python
# Same build dir for both prefixes: the second install must not reuse
# what the first generated.
for pfx in /opt/flyx /usr; do
	root=$tmp/root$pfx
	if ! make -s BUILD="$B" PREFIX="$pfx" DESTDIR="$root" install-data \
		install-python > "$tmp/make.log" 2>&1; then
		bad "PREFIX=$pfx: make install-data install-python failed:" \
			"$(tail -3 "$tmp/make.log")"
		continue
	fi
	pc=$root$pfx/lib/pkgconfig/flyclient.pc
	grep -qx "prefix=$pfx" "$pc" 2>/dev/null && ok ||
		bad "PREFIX=$pfx: flyclient.pc says $(grep '^prefix=' "$pc" 2>&1)"
	grep -qx "Version: $ver" "$pc" 2>/dev/null && ok ||
		bad "PREFIX=$pfx: flyclient.pc $(grep '^Version' "$pc" 2>&1), VERSION is $ver"
	if command -v pkg-config >/dev/null 2>&1; then
		got=$(PKG_CONFIG_PATH=$root$pfx/lib/pkgconfig \
			pkg-config --variable=libdir flyclient 2>&1)
		[ "$got" = "$pfx/lib" ] && ok ||
			bad "PREFIX=$pfx: pkg-config libdir is '$got'"
	fi
	[ -f "$root$pfx/share/flytuned/schemas/tune.request.json" ] && ok ||
		bad "PREFIX=$pfx: schemas not in $pfx/share/flytuned/schemas"
	m1=$root$pfx/share/man/man1/flytune-ctl.1
	m8=$root$pfx/share/man/man8/flytuned.8
	grep -q "^\.IR $pfx/share/flytuned/schemas \.\$" "$m1" 2>/dev/null &&
		ok || bad "PREFIX=$pfx: flytune-ctl.1 does not name $pfx/share/flytuned/schemas"
	grep -q "$pfx/share/flytuned/schemas/config.schema.json" "$m8" \
		2>/dev/null && ok ||
		bad "PREFIX=$pfx: flytuned.8 does not name $pfx/share/flytuned/schemas"
	for m in "$m1" "$m8"; do
		grep -q "^\.TH .*\"flytuned $ver\"" "$m" 2>/dev/null && ok ||
			bad "PREFIX=$pfx: $(basename "$m"): $(grep '^\.TH' "$m" 2>&1) (VERSION $ver)"
		other=$(grep -n 'share/flytuned\|/usr/local' "$m" |
			grep -v "$pfx/share/flytuned")
		[ -z "$other" ] && ok ||
			bad "PREFIX=$pfx: $(basename "$m") names another prefix: $other"
	done
	pyd=$root$pfx/lib/python3/dist-packages
	# flytuned.torch: its modules and its C++ extension's source
	for f in flytuned/__init__.py flytuned/torch/__init__.py \
		flytuned/torch/_ops.py flytuned/torch/_runtime.py \
		flytuned/torch/csrc/flytuned_ops.cpp; do
		[ -f "$pyd/$f" ] && ok || bad "PREFIX=$pfx: $f not in $pyd"
	done
	if command -v python3 >/dev/null 2>&1; then
		got=$(cd "$tmp" && PYTHONPATH=$pyd python3 -c \
			'import flyclient; print(flyclient.__file__); print(flyclient._INSTALLED_LIB)' 2>&1)
		[ "$got" = "$pyd/flyclient/__init__.py
$pfx/lib/libflyclient.so.0" ] && ok ||
			bad "PREFIX=$pfx: installed Python client: $got"
	else
		[ -f "$pyd/flyclient/__init__.py" ] && ok ||
			bad "PREFIX=$pfx: Python client not in $pyd"
	fi
done

# ---------------------------------------------------- --version
for b in flytune-ctl flytuned; do
	exe=${FLY_BUILD_DIR:-build}/$b
	[ -x "$exe" ] || { echo "install: $exe not built, --version not checked"; continue; }
	"$exe" --version 2>&1 | head -1 | grep -q "^$b $ver\\b" && ok ||
		bad "$b --version: $("$exe" --version 2>&1 | head -1) (VERSION $ver)"
done

# ---------------------------------------------------- deps cover the units
pkgs=" $(sh tools/deps.sh --list 2>/dev/null | tr '\n' ' ') "
[ "$pkgs" != "  " ] && ok || bad "tools/deps.sh --list printed nothing"
if command -v dpkg >/dev/null 2>&1; then
	exes=$(sed -n 's/^Exec[A-Za-z]*=[-@:+!]*\(\/[^ ]*\).*/\1/p' \
		systemd/*.service systemd/*.socket | sort -u)
	[ -n "$exes" ] && ok || bad "no Exec lines found in systemd/"
	for exe in $exes; do
		case "$exe" in */flytuned) continue ;; esac
		pkg=$(dpkg -S "$exe" 2>/dev/null | sed -n '1s/:.*//p')
		if [ -z "$pkg" ]; then
			bad "the units run $exe, which no installed package provides"
			continue
		fi
		case "$pkgs" in
		*" $pkg "*) ok ;;
		*) bad "the units run $exe (package $pkg), which tools/deps.sh does not install" ;;
		esac
	done
else
	echo "install: no dpkg, the units' programs are not checked against tools/deps.sh"
fi

# ---------------------------------------------------- fly.sh run, no GPU
mkdir -p "$tmp/bin" "$tmp/dev" "$tmp/devgpu"
touch "$tmp/devgpu/nvidia0"
cat > "$tmp/bin/make" <<EOF
#!/bin/sh
echo "GPU=\${GPU:-} \$*" >> "$tmp/make.calls"
EOF
printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/nvcc"
chmod +x "$tmp/bin/make" "$tmp/bin/nvcc"
# fly [VAR=VALUE...] sh tools/fly.sh ARGS (GPU unset unless given): its
# output in $tmp/fly.out, the make calls in $tmp/make.calls.
fly() {
	rm -f "$tmp/make.calls"
	touch "$tmp/make.calls"
	env -u GPU PATH="$tmp/bin:$PATH" FLY_DEPS=0 "$@" > "$tmp/fly.out" 2>&1
}
fly FLY_DEV_DIR="$tmp/dev" sh tools/fly.sh run
[ "$(grep -c 'GPU=none' "$tmp/fly.out")" = 1 ] &&
	grep -q 'GPU=cuda' "$tmp/fly.out" && ok ||
	bad "fly.sh run, nvcc, no GPU: said '$(cat "$tmp/fly.out")'"
[ "$(cat "$tmp/make.calls" 2>/dev/null)" = "GPU=none -j$(nproc 2>/dev/null || echo 2) all
GPU=none run" ] && ok ||
	bad "fly.sh run, nvcc, no GPU: make calls: $(cat "$tmp/make.calls" 2>&1)"
fly GPU=cuda FLY_DEV_DIR="$tmp/dev" sh tools/fly.sh run
grep -q 'GPU=none' "$tmp/make.calls" "$tmp/fly.out" &&
	bad "fly.sh run with GPU=cuda: $(cat "$tmp/make.calls" "$tmp/fly.out")" || ok
fly FLY_DEV_DIR="$tmp/devgpu" sh tools/fly.sh run
grep -q 'GPU=none' "$tmp/make.calls" "$tmp/fly.out" &&
	bad "fly.sh run with a GPU: $(cat "$tmp/make.calls" "$tmp/fly.out")" || ok
fly FLY_DEV_DIR="$tmp/dev" sh tools/fly.sh test
grep -q 'GPU=none' "$tmp/make.calls" "$tmp/fly.out" &&
	bad "fly.sh test without a GPU skipped the GPU compile checks" || ok
grep -q ' test$' "$tmp/make.calls" && ok ||
	bad "fly.sh test: make calls: $(cat "$tmp/make.calls" 2>&1)"

echo "install: $pass passed, $fail failed"
[ $fail = 0 ]
