#!/bin/sh
# Provision the Vagrant storage VM: aluad with node a and node b each
# holding one address on each fabric (Vagrant gives one per network; the
# second comes from here), run by systemd.
set -eu
add() { # add ADDR to the interface that holds SIBLING
	dev=$(ip -o -4 addr show | awk -v s="$2" '$4 ~ "^"s"/" {print $2}')
	[ -n "$dev" ] || { echo "storage.sh: no interface with $2" >&2; exit 1; }
	ip addr show dev "$dev" | grep -q " $1/" || ip addr add "$1/24" dev "$dev"
}
add 10.77.1.20 10.77.1.10
add 10.77.2.20 10.77.2.10
bin=/vagrant/bin/aluad-linux-amd64
[ -x "$bin" ] || { echo "storage.sh: $bin missing: run 'make build-static' on the host, then 'vagrant provision storage'" >&2; exit 1; }
install -m 0755 "$bin" /usr/local/bin/aluad
install -d /etc/aluad /var/lib/aluad
install -m 0644 /vagrant/cluster-tests/vagrant/aluad.yaml /etc/aluad/aluad.yaml
cat >/etc/systemd/system/aluad.service <<'UNIT'
[Unit]
Description=aluad: a multi-controller implicit-ALUA storage array
After=network-online.target
[Service]
ExecStartPre=/bin/sh -c 'ip addr show | grep -q 10.77.1.20/ || /vagrant/cluster-tests/vagrant/storage.sh'
ExecStart=/usr/local/bin/aluad serve --config /etc/aluad/aluad.yaml --control /run/aluad/aluad.sock
RuntimeDirectory=aluad
Restart=on-failure
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now aluad
systemctl restart aluad
