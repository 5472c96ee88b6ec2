#!/bin/sh
# check-layering.sh ROOT -- fail when an #include crosses the dependency
# directions of STYLE.md (R2):
#   proto/   may include only proto/ headers (and system headers)
#   client/  proto/, client/
#   ctl/     flyclient.h (the installed header), its own ctl/ headers and
#            proto/fly_record.h (the one export-record validator, which
#            the daemon uses too: issue 23)
#   kernels/ proto/, kernels/
#   daemon/  proto/, kernels/include/flyk.h, daemon/
# and when a daemon symbol (flyd_) appears in client/ or ctl/.
# Inside kernels/gpu (see kernels_gpu below): prim/ includes only prim/;
# the core (backend, launch API, gpu_int.h at kernels/gpu's top) prim/
# and the core; an op folder (gemm/, norm/, topk/, mqa/, ...) prim/, the
# core, itself and a kernels/vendor header (a vendor candidate's
# declarations: cudnn_attn.h), never another op; kernels/vendor the core,
# gemm/ and itself;
# and nothing under kernels/ includes a tests/ header.  Unless
# --no-cycles is given, it also fails when the files of one folder call
# each other in a circle (tools/check-cycles.py; issue 23).
# Usage: `make` runs it with --no-cycles before compiling anything (an
# #include across the layers fails the build at once); `make layering`,
# `make check` and the test suite (tools/check.sh) run all of it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cycles=1
if [ "${1:-}" = --no-cycles ]; then
	cycles=0
	shift
fi
root=${1:-.}
cd "$root" || exit 2
fail=0

# allowed_for DIR -> space-separated list of allowed project header dirs
allowed_for() {
	case "$1" in
	proto) echo "proto" ;;
	client) echo "proto client" ;;
	ctl) echo "ctl-only" ;;
	kernels) echo "proto kernels" ;;
	daemon) echo "proto kernels daemon tuning-db" ;;
	*) echo "any" ;;
	esac
}

# header_home NAME -> which module owns a project header of that name
header_home() {
	base=$(basename "$1")
	for d in proto client daemon kernels/include kernels/gpu kernels/gpu/* kernels/cpu kernels/vendor kernels/testing kernels ctl; do
		if [ -f "$d/$base" ]; then
			echo "${d%%/*}"
			return
		fi
	done
	echo ""
}

for mod in proto client ctl kernels daemon; do
	[ -d "$mod" ] || continue
	allow=$(allowed_for "$mod")
	files=$(find "$mod" -type f \( -name '*.c' -o -name '*.h' -o -name '*.hip' \) 2>/dev/null)
	for f in $files; do
		grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
		while IFS= read -r line; do
			inc=$(echo "$line" | sed 's/.*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/')
			ln=${line%%:*}
			case "$inc" in
			*../*) echo "$f:$ln: layering: relative include \"$inc\" reaches outside the module"; echo x ;;
			esac
			home=$(header_home "$inc")
			[ -n "$home" ] || continue
			if [ "$allow" = "ctl-only" ]; then
				case "$(basename "$inc")" in
				flyclient.h|fly_record.h) continue ;;
				esac
				[ "$home" = ctl ] && continue
				echo "$f:$ln: layering: ctl/ may include only flyclient.h, fly_record.h and ctl/ headers, not \"$inc\""
				echo x
				continue
			fi
			ok=0
			for a in $allow; do [ "$a" = "$home" ] && ok=1; done
			if [ $ok = 0 ]; then
				echo "$f:$ln: layering: $mod/ must not include $home/ header \"$inc\""
				echo x
			fi
		done
	done
done > /tmp/layering.$$ 2>&1
for mod in client ctl proto kernels; do
	[ -d "$mod" ] || continue
	grep -rn --include='*.c' --include='*.h' --include='*.hip' -E '\bflyd_' "$mod" 2>/dev/null |
		sed 's/$/  <- layering: daemon symbol outside daemon\//' >> /tmp/layering.$$
	[ -n "$(grep -rln --include='*.c' --include='*.h' -E '\bflyd_' "$mod" 2>/dev/null)" ] && echo x >> /tmp/layering.$$
done
# gpu_zone FILE -> prim | core | op:NAME | vendor | "" (outside)
gpu_zone() {
	case "$1" in
	kernels/gpu/prim/*) echo prim ;;
	kernels/gpu/*/*) n=${1#kernels/gpu/}; echo "op:${n%%/*}" ;;
	kernels/gpu/*) echo core ;;
	kernels/vendor/*) echo vendor ;;
	*) echo "" ;;
	esac
}
# gpu_allowed ZONE TARGET_ZONE -> 0 when ZONE may include TARGET_ZONE
gpu_allowed() {
	case "$1:$2" in
	prim:prim | core:prim | core:core) return 0 ;;
	op:*:prim | op:*:core) return 0 ;;
	vendor:core | vendor:op:gemm | vendor:vendor) return 0 ;;
	op:*:vendor) return 0 ;;
	esac
	case "$1" in op:*) [ "$1" = "$2" ] && return 0 ;; esac
	return 1
}
kernels_gpu() {
	files=$(find kernels/gpu kernels/vendor -type f \( -name '*.c' -o -name '*.h' -o -name '*.hip' \) 2>/dev/null)
	for f in $files; do
		z=$(gpu_zone "$f")
		grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
		while IFS= read -r line; do
			inc=$(echo "$line" | sed 's/.*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/')
			ln=${line%%:*}
			if [ -n "$(find tests -name "$(basename "$inc")" 2>/dev/null | head -1)" ] &&
			   [ ! -f "kernels/gpu/$inc" ] && [ ! -f "$(dirname "$f")/$inc" ]; then
				echo "$f:$ln: layering: kernels/ must not include the test header \"$inc\""
				echo x
				continue
			fi
			if [ -f "kernels/gpu/$inc" ]; then t="kernels/gpu/$inc"
			elif [ -f "$(dirname "$f")/$inc" ]; then t="$(dirname "$f")/$inc"
			elif [ -f "kernels/vendor/$inc" ]; then t="kernels/vendor/$inc"
			else continue; fi
			tz=$(gpu_zone "$t")
			if ! gpu_allowed "$z" "$tz"; then
				echo "$f:$ln: layering: kernels/gpu $z must not include $tz header \"$inc\""
				echo x
			fi
		done
	done
}
[ -d kernels ] && kernels_gpu >> /tmp/layering.$$ 2>&1
if grep -qx x /tmp/layering.$$; then
	grep -vx x /tmp/layering.$$ >&2
	fail=1
fi
rm -f /tmp/layering.$$
if [ $cycles = 1 ]; then
	if ! command -v python3 >/dev/null 2>&1; then
		echo "layering: python3 not found: call cycles not checked" >&2
	elif ! python3 "$here/check-cycles.py" . >/tmp/cycles.$$ 2>&1; then
		cat /tmp/cycles.$$ >&2
		fail=1
	fi
	rm -f /tmp/cycles.$$
fi
exit $fail
