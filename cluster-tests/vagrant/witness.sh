#!/bin/sh
# Provision the witness VM of the Vagrant lab: the array's etcd, one
# member (aluad witness), the NFS export that holds the LUN files, and the fence
# agent the controllers reach over SSH (nfs-fence.sh).
#
#   witness.sh FENCE_PUBLIC_KEY
set -eu
pub=$1
bin=/vagrant/bin/aluad-linux-amd64
[ -x "$bin" ] || { echo "witness.sh: $bin missing: run 'make build-static' on the host, then 'vagrant provision'" >&2; exit 1; }
install -m 0755 "$bin" /usr/local/bin/aluad
install -m 0755 /vagrant/cluster-tests/vagrant/nfs-fence.sh /usr/local/sbin/aluad-nfs-fence
install -d /etc/aluad /srv/aluad /var/lib/aluad
printf 'a 10.77.3.10\nb 10.77.3.20\n' >/etc/aluad/fence-nodes

# The fence's packet filter, before any export: a node fenced before a
# reboot of this VM stays fenced (the set is rebuilt from the records).
cat >/usr/local/sbin/aluad-fence-table <<'SH'
#!/bin/sh
nft -f - <<NFT
table inet aluad_fence
delete table inet aluad_fence
table inet aluad_fence {
	set fenced { type ipv4_addr; }
	chain input {
		type filter hook input priority -10; policy accept;
		ip saddr @fenced tcp dport 22 accept
		ip saddr @fenced drop
	}
}
NFT
for f in /var/lib/aluad-fence/*; do
	[ -f "$f" ] || continue
	case $f in *.up|*.tmp) continue ;; esac
	addr=$(awk -v n="$(basename "$f")" '$1 == n {print $2}' /etc/aluad/fence-nodes)
	[ -z "$addr" ] || nft add element inet aluad_fence fenced "{ $addr }"
done
SH
chmod 0755 /usr/local/sbin/aluad-fence-table
cat >/etc/systemd/system/aluad-fence-table.service <<'UNIT'
[Unit]
Description=aluad lab: drop fenced controllers' packets
Before=nfs-server.service network-pre.target
Wants=network-pre.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/aluad-fence-table
[Install]
WantedBy=multi-user.target
UNIT

# NFSv3 only: no grace period when the fence restarts the server's threads.
echo '/srv/aluad 10.77.3.0/24(rw,sync,no_subtree_check,no_root_squash)' >/etc/exports
mkdir -p /etc/nfs.conf.d
printf '[nfsd]\nvers4=n\nvers4.0=n\nvers4.1=n\nvers4.2=n\nthreads=8\n' >/etc/nfs.conf.d/aluad.conf

install -d -m 0700 /root/.ssh
echo "command=\"/usr/local/sbin/aluad-nfs-fence\",restrict $pub" >/root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys

cat >/etc/systemd/system/aluad-witness.service <<'UNIT'
[Unit]
Description=aluad lab: the array's etcd (one member)
After=network-online.target
Wants=network-online.target
[Service]
# The lab's only etcd member (docs/vagrant.md, why one): the controllers
# use it as an existing etcd (cluster.yaml) and run none of their own.
# Its data directory is not the earlier three-member layout's
# (/var/lib/aluad/w): a member restarted on that one would wait for the
# other two for good.
ExecStart=/usr/local/bin/aluad witness --name w --data /var/lib/aluad/etcd1 \
	--client-url http://10.77.3.30:2379 --peer-url http://10.77.3.30:2380 \
	--cluster w=http://10.77.3.30:2380
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
UNIT
# No NFS server without the fence's filter.
mkdir -p /etc/systemd/system/nfs-server.service.d
printf '[Unit]\nRequires=aluad-fence-table.service\nAfter=aluad-fence-table.service\n' >/etc/systemd/system/nfs-server.service.d/aluad-fence.conf
systemctl daemon-reload
systemctl enable --now aluad-fence-table.service
systemctl enable nfs-server.service
systemctl restart nfs-server.service
exportfs -ra
systemctl enable aluad-witness.service
systemctl restart aluad-witness.service
