#!/bin/sh
# systemd-verify.sh -- `systemd-analyze verify` on the units, with the
# ExecStart binary made to exist (a temp copy of the tree's paths), plus
# checks of the hardening rules that matter for GPUs.  Prints a plain
# "N passed, N failed" line.
set -u
cd "$(dirname "$0")/.."
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "systemd: $*"; fail=$((fail + 1)); }
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd: systemd-analyze not installed (tools/deps.sh installs systemd)"
	echo "systemd: 0 passed, 1 failed"
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# verify needs the ExecStart binary to exist: point the units at a stub.
mkdir -p "$tmp/units"
printf '#!/bin/sh\nexit 0\n' > "$tmp/flytuned"
chmod +x "$tmp/flytuned"
sed "s|/usr/local/bin/flytuned|$tmp/flytuned|" systemd/flytuned@.service > "$tmp/units/flytuned@.service"
cp systemd/flytuned@.socket "$tmp/units/"
(cd "$tmp/units" && ln -s flytuned@.service flytuned@0.service && ln -s flytuned@.socket flytuned@0.socket)
out=$(cd "$tmp/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no \
	flytuned@0.service flytuned@0.socket 2>&1)
# Lines about other units of the host (not ours) are not our problem.
ours=$(echo "$out" | grep -i 'flytuned' | grep -v 'Failed to put bus name' || true)
if [ -n "$ours" ]; then bad "verify: $ours"; else ok; fi
u=systemd/flytuned@.service
grep -q '^Type=notify' $u && ok || bad "Type=notify missing"
grep -q '^PrivateDevices=yes' $u && bad "PrivateDevices=yes hides the GPUs" || ok
grep -q '^DevicePolicy=closed' $u && ok || bad "DevicePolicy=closed missing"
for d in /dev/kfd char-drm /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia0; do
	grep -q "^DeviceAllow=$d " $u && ok || bad "DeviceAllow=$d missing"
done
grep -q '^SupplementaryGroups=render video' $u && ok || bad "SupplementaryGroups missing"
grep -q '^RuntimeDirectory=flytuned' $u && ok || bad "RuntimeDirectory missing"
grep -q '^StateDirectory=flytuned' $u && ok || bad "StateDirectory missing"
grep -q '^WatchdogSec=' $u && ok || bad "WatchdogSec missing"
grep -q '^ListenStream=/run/flytuned/gpu%i.sock' systemd/flytuned@.socket && ok || bad "socket path"
# RELIABILITY.md S5: the exposure score of the unit as installed, offline
# (no running systemd needed), at most 3.0.
exp=$(cd "$tmp/units" && systemd-analyze security --offline=true \
	flytuned@0.service 2>/dev/null |
	sed -n 's/.*Overall exposure level for flytuned@0.service: \([0-9.]*\).*/\1/p')
if [ -z "$exp" ]; then
	bad "systemd-analyze security --offline gave no exposure level"
elif awk -v e="$exp" 'BEGIN { exit !(e <= 3.0) }'; then
	echo "systemd: exposure $exp (<= 3.0)"
	ok
else
	bad "exposure $exp > 3.0 (RELIABILITY.md S5)"
fi
echo "systemd: $pass passed, $fail failed"
[ $fail = 0 ]
