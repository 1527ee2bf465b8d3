#!/bin/sh
# Provision a controller VM of the Vagrant lab: aluad controller for one
# node (the etcd it uses is the witness's), the LUN files on the
# witness's NFS export, and the fence agent's key.
#
#   ALUAD_FENCE_KEY=... ALUAD_API_TOKEN=... controller.sh NODE
#
# (the fence agent's private key and the API's token, made by the
# Vagrantfile on the host).
#
# At every boot, before the export is mounted, the controller asks the
# witness to unfence it; the witness refuses the boot it fenced, so a
# kernel that may still hold the files' dirty pages never reaches them.
set -eu
node=$1
case $node in
a | b) ;;
*) echo "controller.sh: node a or b" >&2; exit 2 ;;
esac
bin=/vagrant/bin/aluad-linux-amd64
[ -x "$bin" ] || { echo "controller.sh: $bin missing: run 'make build-static' on the host, then 'vagrant provision'" >&2; exit 1; }
install -m 0755 "$bin" /usr/local/bin/aluad
install -m 0755 /vagrant/cluster-tests/vagrant/fence.sh /usr/local/sbin/aluad-fence
install -d /etc/aluad /var/lib/aluad
# Not through a mount: a fenced boot's NFS mount does not answer.
grep -q " /srv/aluad " /proc/mounts || install -d /srv/aluad
[ -n "${ALUAD_FENCE_KEY:-}" ] && [ -n "${ALUAD_API_TOKEN:-}" ] || { echo "controller.sh: ALUAD_FENCE_KEY and ALUAD_API_TOKEN are required" >&2; exit 2; }
(umask 077; printf '%s\n' "$ALUAD_FENCE_KEY" | sed '/^$/d' >/etc/aluad/fence-key; printf '%s\n' "$ALUAD_API_TOKEN" | sed '/^$/d' >/etc/aluad/api-token)
install -m 0644 /vagrant/cluster-tests/vagrant/cluster.yaml /etc/aluad/cluster.yaml
echo "$node" >/etc/aluad/node

cat >/etc/systemd/system/aluad-unfence.service <<'UNIT'
[Unit]
Description=aluad lab: ask the witness to let this boot reach the LUN files
After=network-online.target
Wants=network-online.target
Before=srv-aluad.mount
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'until /usr/local/sbin/aluad-fence unfence $(cat /etc/aluad/node) $(cat /proc/sys/kernel/random/boot_id); do sleep 2; done'
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
UNIT
cat >/etc/systemd/system/srv-aluad.mount <<'UNIT'
[Unit]
Description=aluad lab: the LUN files on the witness
After=aluad-unfence.service network-online.target
Requires=aluad-unfence.service
[Mount]
What=10.77.3.30:/srv/aluad
Where=/srv/aluad
Type=nfs
Options=vers=3,proto=tcp,hard,nolock
[Install]
WantedBy=multi-user.target
UNIT
# A fenced controller whose process does not exit (it waits for etcd
# without serving) is found by the same check every 30 s. (Each check is
# an SSH handshake to the witness: seconds of emulated crypto on both
# machines under TCG; every 10 s took a third of a controller's CPU.)
cat >/etc/systemd/system/aluad-rejoin.service <<'UNIT'
[Unit]
Description=aluad lab: reboot this controller if the witness fenced this boot
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/aluad-fence rejoin
UNIT
cat >/etc/systemd/system/aluad-rejoin.timer <<'UNIT'
[Unit]
Description=aluad lab: check every 30 s whether this boot is fenced
[Timer]
OnBootSec=30s
OnUnitActiveSec=30s
AccuracySec=1s
[Install]
WantedBy=timers.target
UNIT
cat >/etc/systemd/system/aluad-controller.service <<UNIT
[Unit]
Description=aluad lab: controller $node
After=srv-aluad.mount network-online.target
Requires=srv-aluad.mount
[Service]
# A controller the other fenced (cut from the export) can never write
# again in this boot: it reboots at once, as a power fence would have
# reset it, and rejoins with a new boot.
ExecStartPre=/usr/local/sbin/aluad-fence rejoin
ExecStart=/usr/local/bin/aluad controller --config /etc/aluad/cluster.yaml --node $node \\
	--control /run/aluad/aluad.sock --api 0.0.0.0:8080 --api-token-file /etc/aluad/api-token
RuntimeDirectory=aluad
RuntimeDirectoryPreserve=yes
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now aluad-unfence.service
systemctl enable srv-aluad.mount
# The machines come up in parallel: the witness may still be making its
# export (on a loaded host, longer than mount.nfs's own 2 min of
# retries). Wait for it, within a bound.
tries=0
until systemctl start srv-aluad.mount; do
	tries=$((tries + 1))
	[ $tries -lt 40 ] || { echo "controller.sh: the witness's export /srv/aluad never mounted" >&2; exit 1; }
	echo "controller.sh: the witness's export is not there yet; again in 10 s" >&2
	sleep 10
done
systemctl enable --now aluad-rejoin.timer
systemctl enable aluad-controller.service
systemctl restart aluad-controller.service
