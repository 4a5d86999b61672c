#!/bin/busybox sh
# shellcheck shell=dash
# /init of the microVM guest's initramfs (built by scripts/microvm-kernel.sh). Kernel parameters it reads:
#   sandbox.ip=ADDR/PREFIX sandbox.gw=ADDR   the tenant-subnet address of eth0 and its default route
#   sandbox.backup=1                         /dev/vdd is the backup disk, mounted at /mnt/backup
# The nested initramfs (initrd-nested.img: this one with KVM's modules appended) loads KVM, for a guest given
# the host's CPU with vmx or svm (docs/microvm.md, "Nested virtualisation").
# /dev/vda is the root (a copy-on-write overlay of the sandbox image), /dev/vdb the home disk, /dev/vdc the
# configuration (lib/microvm/launcher.ts configDisk: `env NAME BASE64`, `key BASE64`, `rootkey BASE64`,
# `file NAME BASE64` and `protect BASE64` lines, NUL-padded): the environment the entrypoint runs with, the keys that may log in as
# the agent (a read-only tmpfs at /etc/ssh/authorized_keys, as the container's mount), the platform's key root
# may log in with only to run /usr/local/sbin/sandbox-platform-command (a container has none), the secrets.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
  echo "sandbox-init: ERROR: $*"
  poweroff -f
}

ip_addr='' gw='' backup='' mmio=''
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case "$arg" in
    sandbox.ip=*) ip_addr=${arg#sandbox.ip=} ;;
    sandbox.gw=*) gw=${arg#sandbox.gw=} ;;
    sandbox.backup=1) backup=1 ;;
    # Built-in drivers read virtio_mmio.device= from the command line; a module gets them from insmod.
    virtio_mmio.device=*) mmio="$mmio device=${arg#virtio_mmio.device=}" ;;
  esac
done
for module in virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net; do
  if [ "$module" = virtio_mmio ]; then
    # shellcheck disable=SC2086 # one device= argument per device
    insmod /lib/modules/virtio_mmio.ko $mmio || fail "insmod virtio_mmio"
  else
    insmod "/lib/modules/$module.ko" || fail "insmod $module"
  fi
done
# KVM for the agent's own VMs, where this is the nested initramfs. A guest whose KVM does not load (a CPU
# with neither flag) boots all the same, without /dev/kvm, and says why on its console.
if [ -f /lib/modules/kvm.ko ]; then
  vendor=''
  grep -qw vmx /proc/cpuinfo && vendor=kvm-intel
  grep -qw svm /proc/cpuinfo && vendor=kvm-amd
  if [ -z "$vendor" ]; then
    echo "sandbox-init: WARNING: no nested virtualisation: the guest's CPU has neither vmx nor svm"
  elif insmod /lib/modules/irqbypass.ko && insmod /lib/modules/kvm.ko && insmod "/lib/modules/$vendor.ko" &&
    # The agent's to open, as a desktop's kvm group gives it to its user: the VM is the sandbox's boundary.
    chmod 0666 /dev/kvm; then
    echo "sandbox-init: nested virtualisation: $vendor loaded, /dev/kvm ready"
  else
    echo "sandbox-init: WARNING: no nested virtualisation: $vendor did not load"
  fi
fi

last=/dev/vdc
[ -n "$backup" ] && last=/dev/vdd
i=0
while [ ! -b /dev/vda ] || [ ! -b /dev/vdb ] || [ ! -b "$last" ]; do
  i=$((i + 1))
  [ $i -gt 100 ] && fail "no /dev/vda../dev/${last#/dev/} after 10 s"
  sleep 0.1
done
# A stop is QMP quit, with no shutdown in the guest: commit=1 and nodelalloc (blocks allocated at write, so
# data=ordered writes a file's data before the journal commits its size) bound what it loses to about a
# second. With delayed allocation a file written up to 30 s before could come back empty.
mount -t ext4 -o commit=1,nodelalloc /dev/vda /newroot || fail "cannot mount the root disk /dev/vda"
mkdir -p /newroot/home/agent
mount -t ext4 -o nodev,nosuid,commit=1,nodelalloc /dev/vdb /newroot/home/agent || fail "cannot mount the home disk /dev/vdb"
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
# /run/secrets is there even without secrets: on GCP the platform installs the storage token into it
# (sandbox-platform-command install-gcs-token).
mkdir -m 0755 /newroot/run/secrets
mount -t tmpfs -o mode=1777,size=512m tmpfs /newroot/tmp
mount -t tmpfs -o mode=1777,size=256m tmpfs /newroot/var/tmp
if [ -n "$backup" ]; then
  mkdir -p /newroot/mnt/backup
  mount -t ext4 -o nodev,nosuid,commit=1,nodelalloc /dev/vdd /newroot/mnt/backup || fail "cannot mount the backup disk /dev/vdd"
fi
mkdir -p /newroot/etc/ssh/authorized_keys
mount -t tmpfs -o mode=0755 tmpfs /newroot/etc/ssh/authorized_keys
tr -d '\000' </dev/vdc >/config || fail "cannot read the configuration disk /dev/vdc"
keys=/newroot/etc/ssh/authorized_keys/agent
rootkeys=/newroot/etc/ssh/authorized_keys/root
: >"$keys"
while read -r kind name value; do
  case "$kind" in
    env)
      decoded=$(echo "$value" | base64 -d)
      export "$name=$decoded"
      # The same environment for logins (the terminal and exec over SSH source it), shell-quoted.
      printf "export %s='%s'\n" "$name" "$(printf '%s' "$decoded" | sed "s/'/'\\\\''/g")" >>/newroot/run/sandbox-env
      ;;
    key) echo "$name" | base64 -d >>"$keys" && echo >>"$keys" ;;
    # sshd runs the forced command whatever the client asks (it reads the ask from SSH_ORIGINAL_COMMAND).
    rootkey)
      printf 'restrict,command="/usr/local/sbin/sandbox-platform-command" ' >>"$rootkeys"
      echo "$name" | base64 -d >>"$rootkeys" && echo >>"$rootkeys"
      ;;
    # A path under the home the agent may not change (a repository's .git/hooks), as a container's read-only
    # bind mount of it: resolved inside the guest's root, so a symlink cannot point it outside the home.
    protect)
      relative=$(echo "$name" | base64 -d)
      resolved=$(chroot /newroot /usr/bin/realpath -e -- "/home/agent/$relative") ||
        fail "protected path $relative does not exist under /home/agent"
      case "$resolved" in
        /home/agent/?*) ;;
        *) fail "protected path $relative resolves to $resolved, outside /home/agent" ;;
      esac
      { mount --bind "/newroot$resolved" "/newroot$resolved" &&
        mount -o remount,bind,ro "/newroot$resolved"; } || fail "cannot protect $relative"
      ;;
    # The project's secrets, as a container's read-only /run/secrets: root's, readable by the agent.
    file)
      echo "$value" | base64 -d >"/newroot/run/secrets/$name" || fail "cannot write /run/secrets/$name"
      chmod 0444 "/newroot/run/secrets/$name"
      ;;
  esac
done </config
rm -f /config
[ -s "$keys" ] || fail "no authorized key in the configuration disk"
chmod 0644 "$keys"
[ -f "$rootkeys" ] && chmod 0600 "$rootkeys"
mount -o remount,ro /newroot/etc/ssh/authorized_keys

echo sandbox >/proc/sys/kernel/hostname
# The kernel log is root's alone, as a container has none (its reads are refused by dmesg_restrict already).
chmod 0600 /dev/kmsg
# No user namespaces in the guest, as a container's seccomp profile refuses unshare(CLONE_NEWUSER): they are
# the usual way from an unprivileged user to kernel code written for root.
echo 0 >/proc/sys/user/max_user_namespaces || fail "cannot turn off user namespaces"
# What a container gets from its host's settings (a distribution's defaults, which a bare kernel lacks): no
# hard link to a file one does not own (the agent could give the git keeper a second name of a .git file
# in a worktree), no link, FIFO or file of another user's followed or opened for writing by root in a sticky
# world-writable directory (/tmp).
for protection in protected_hardlinks protected_symlinks protected_fifos protected_regular; do
  echo 1 >"/proc/sys/fs/$protection" || fail "cannot set fs.$protection"
done
ip link set lo up
if [ -n "$ip_addr" ]; then
  ip link set eth0 up || fail "no eth0"
  ip addr add "$ip_addr" dev eth0 || fail "bad sandbox.ip=$ip_addr"
  [ -n "$gw" ] && { ip route add default via "$gw" || fail "bad sandbox.gw=$gw"; }
fi
echo "sandbox-init: root, home and network ready; starting the sandbox entrypoint"
mount --move /dev /newroot/dev
# What a container engine mounts: ptys for the terminal and SSH logins, and POSIX shared memory.
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=0620,ptmxmode=0666 devpts /newroot/dev/pts || fail "cannot mount /dev/pts"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m shm /newroot/dev/shm || fail "cannot mount /dev/shm"
# And the links a container engine makes (devtmpfs has none of them; udev would): bash's process
# substitution opens /dev/fd/N, and scripts read /dev/stdin. Without them sandbox-sync, which waits on a
# `<(:)`, failed at every start (supervisord restarted it until it gave up, a minute or two in).
ln -s /proc/self/fd /newroot/dev/fd || fail "cannot link /dev/fd"
ln -s /proc/self/fd/0 /newroot/dev/stdin || fail "cannot link /dev/stdin"
ln -s /proc/self/fd/1 /newroot/dev/stdout || fail "cannot link /dev/stdout"
ln -s /proc/self/fd/2 /newroot/dev/stderr || fail "cannot link /dev/stderr"
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
# The guest's clock after a resume (lib/microvm/suspend.ts): the saved VM's clock goes on from where it
# stopped, behind the host by as long as it slept, and nothing in the guest notices (its TSC is QEMU's
# virtual clock, which stands still while the VM is saved). The RTC is the host's clock (-rtc clock=host)
# in any case, so a keeper looks every half second and steps the system clock to it when they part by more
# than two seconds, to within half a second, and says so on the console (this script's output, inherited),
# which the host's resume waits for. It is root's with one capability, SYS_TIME, and nothing else (no new
# privileges, an empty bounding set beside it), outside the entrypoint's tree; it reads the RTC and the
# clock, nothing of the agent's.
cat >/newroot/run/sandbox-clock.py <<'CLOCK'
import time

RTC = "/sys/class/rtc/rtc0/since_epoch"


def rtc():
    with open(RTC) as f:
        return int(f.read())


try:
    rtc()
except OSError as error:
    print(f"sandbox-clock: no RTC to follow ({error}); the clock is not kept after a resume", flush=True)
    raise SystemExit(0)
print("sandbox-clock: keeping the clock to the RTC", flush=True)
while True:
    time.sleep(0.5)
    try:
        now = rtc()
        apart = now - time.time()
        if abs(apart) > 2:
            # The RTC counts whole seconds: the middle of the one it shows is within half a second.
            time.clock_settime(time.CLOCK_REALTIME, now + 0.5)
            print(f"sandbox-clock: stepped {apart:+.0f} s to the RTC", flush=True)
    except OSError as error:
        print(f"sandbox-clock: {error}", flush=True)
        time.sleep(10)
CLOCK
chmod 0600 /newroot/run/sandbox-clock.py
# A background job's standard input is /dev/null, which the shell opens before any redirection: /dev moved
# into the new root above, so the initramfs gets a node of its own (switch_root removes it with the rest).
mknod -m 0666 /dev/null c 1 3
# switch_root below empties the initramfs and moves /newroot to /: a keeper not yet inside /newroot by then
# finds no setpriv ("can't execute '/usr/bin/setpriv'", seen under emulation), and a resumed guest's clock is
# never kept. So the keeper's first act in the new root is a mark there (a shell's redirection, no program of
# the initramfs's), and the hand-over waits for it; a keeper that ended (a zombie until this shell reaps it)
# is not waited for, and the wait is bounded.
started=/newroot/run/sandbox-clock.started
chroot /newroot /bin/sh -c ': >/run/sandbox-clock.started && exec /usr/bin/setpriv --no-new-privs \
  --bounding-set -all,+sys_time --inh-caps -all /usr/bin/python3 -IS /run/sandbox-clock.py' </dev/null &
clock=$!
i=0
while [ ! -e "$started" ] && [ -d "/proc/$clock" ] && [ "$(cut -d ' ' -f 3 "/proc/$clock/stat" 2>/dev/null)" != Z ]; do
  i=$((i + 1))
  [ $i -gt 1200 ] && break # 60 s
  sleep 0.05
done
[ -e "$started" ] || echo "sandbox-init: WARNING: the clock keeper did not start; a resumed guest's clock is not kept"
rm -f "$started"
# What a container engine gives the entrypoint (components/tenant/sandbox.ts; lib/constants.ts
# SANDBOX_CAPABILITIES, which tests/unit/tenant-pure.test.ts holds this line to): no new privileges for any
# process (a setuid binary raises nothing), and a bounding set of the eight capabilities the entrypoint and
# sshd need, so no process of the guest, root's included, ever holds another. AUDIT_WRITE is one of them: sshd
# records a terminal login in the kernel's audit log and ends the session when it may not.
exec switch_root /newroot /usr/bin/setpriv --no-new-privs --bounding-set -all,+chown,+dac_override,+fowner,+setuid,+setgid,+sys_chroot,+kill,+audit_write /usr/local/sbin/sandbox-entrypoint
