"""Berth's seccomp profile for every sandbox container, built here as data.

An allowlist: anything not named below — including any system call newer than this
list — fails with EPERM. It was made from the kernel's own table of x86_64 system calls
(Linux 6.1 UAPI headers, `asm/unistd_64.h`) by removing every call that reaches past a
process's own resources, the calls Docker documents as blocked by its default profile
(docs.docker.com/engine/security/seccomp) and io_uring, which that default stopped
allowing in engine 25 while the 20.10 engine here still allows it. Calls a sandbox
could only use with a capability it never holds are denied outright, so no capability
added by mistake would ever reopen them.

Three calls are allowed only in part: `clone` without any namespace flag (so no user
namespace: `unshare -Ur` and its clone form both fail), `personality` for the plain
Linux personas, and `socket` for every family but vsock (a path out of the VM on some
hosts). `clone3` passes its flags in memory a filter cannot read, so it answers ENOSYS
and the C library falls back to `clone`. `ptrace` is allowed (debuggers in a sandbox)
and withdrawn under gVisor by sandbox.hardening.
"""

from typing import Any

ENOSYS, EPERM = 38, 1
CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000
)  # CLONE_NEWNET
PERSONAS = (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF)  # Linux, 32-bit, uname26; query
AF_VSOCK = 40

# Denied, by what they would reach. Kept as a table (not just left out) so a reader
# sees each decision, and a test can check none slipped into the allowlist.
DENIED: dict[str, str] = {
    **dict.fromkeys(
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
        "io_uring: a large kernel surface, off in Docker's default since engine 25",
    ),
    **dict.fromkeys(("unshare", "setns"), "namespaces: a user namespace gives root inside it"),
    **dict.fromkeys(
        (
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "move_mount",
            "open_tree",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ),
        "mounts: the filesystem layout is the engine's",
    ),
    **dict.fromkeys(
        ("bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "kcmp"),
        "kernel introspection and race helpers",
    ),
    **dict.fromkeys(("add_key", "request_key", "keyctl"), "the kernel keyring is not namespaced"),
    **dict.fromkeys(
        (
            "init_module",
            "finit_module",
            "delete_module",
            "create_module",
            "query_module",
            "get_kernel_syms",
            "kexec_load",
            "kexec_file_load",
            "reboot",
            "swapon",
            "swapoff",
            "acct",
            "quotactl",
            "quotactl_fd",
            "nfsservctl",
            "_sysctl",
            "sysfs",
            "uselib",
            "ustat",
            "vhangup",
            "syslog",
        ),
        "the host's kernel and devices",
    ),
    **dict.fromkeys(
        (
            "settimeofday",
            "clock_settime",
            "clock_adjtime",
            "adjtimex",
            "sethostname",
            "setdomainname",
        ),
        "the host's clock and names",
    ),
    **dict.fromkeys(("ioperm", "iopl", "modify_ldt"), "hardware I/O and descriptor tables"),
    **dict.fromkeys(
        (
            "get_mempolicy",
            "set_mempolicy",
            "set_mempolicy_home_node",
            "mbind",
            "migrate_pages",
            "move_pages",
        ),
        "NUMA placement of other processes",
    ),
    **dict.fromkeys(
        (
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
            "process_mrelease",
            "pidfd_getfd",
        ),
        "other processes' memory and files",
    ),
    **dict.fromkeys(("name_to_handle_at", "open_by_handle_at"), "file handles bypass paths"),
    **dict.fromkeys(("fanotify_init", "fanotify_mark"), "filesystem-wide watches"),
    **dict.fromkeys(("memfd_secret",), "memory hidden from the kernel's own checks"),
    **dict.fromkeys(
        (
            "afs_syscall",
            "tuxcall",
            "security",
            "vserver",
            "putpmsg",
            "getpmsg",
            "epoll_ctl_old",
            "epoll_wait_old",
            "remap_file_pages",
        ),
        "unimplemented or obsolete",
    ),
}

# One string, split below: 280 names quoted one by one would not read in one sitting.
_ALLOWED = (
    "accept accept4 access alarm arch_prctl bind brk capget capset chdir chmod chown "
    "clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range "
    "creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 "
    "epoll_wait eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 "
    "fadvise64 fallocate fchdir fchmod fchmodat fchown fchownat fcntl fdatasync fgetxattr "
    "flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex "
    "futex_waitv futimesat get_robust_list get_thread_area getcpu getcwd getdents getdents64 "
    "getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid "
    "getpriority getrandom getresgid getresuid getrlimit getrusage getsid getsockname "
    "getsockopt gettid gettimeofday getuid getxattr inotify_add_watch inotify_init "
    "inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents io_setup "
    "io_submit ioctl ioprio_get ioprio_set kill landlock_add_rule landlock_create_ruleset "
    "landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr "
    "lremovexattr lseek lsetxattr lstat madvise membarrier memfd_create mincore mkdir mkdirat "
    "mknod mknodat mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open "
    "mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock "
    "munlockall munmap nanosleep newfstatat open openat openat2 pause pidfd_open "
    "pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 "
    "preadv preadv2 prlimit64 pselect6 ptrace pwrite64 pwritev pwritev2 read readahead "
    "readlink readlinkat readv recvfrom recvmmsg recvmsg removexattr rename renameat "
    "renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask "
    "rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo "
    "sched_get_priority_max sched_get_priority_min sched_getaffinity sched_getattr "
    "sched_getparam sched_getscheduler sched_rr_get_interval sched_setaffinity "
    "sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl "
    "semget semop semtimedop sendfile sendmmsg sendmsg sendto set_robust_list "
    "set_thread_area set_tid_address setfsgid setfsuid setgid setgroups setitimer setpgid "
    "setpriority setregid setresgid setresuid setreuid setrlimit setsid setsockopt setuid "
    "setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair "
    "splice stat statfs statx symlink symlinkat sync sync_file_range syncfs sysinfo tee "
    "tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_settime "
    "timerfd_create timerfd_gettime timerfd_settime times tkill truncate umask uname unlink "
    "unlinkat utime utimensat utimes vfork vmsplice wait4 waitid write writev"
)
ALLOWED = tuple(_ALLOWED.split())


def profile() -> dict[str, Any]:
    """The profile in the engine's JSON form (OCI seccomp, as `--security-opt
    seccomp=` takes it)."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {
                "architecture": "SCMP_ARCH_X86_64",
                "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            },
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": [
            {"names": sorted(ALLOWED), "action": "SCMP_ACT_ALLOW"},
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [
                    {
                        "index": 0,
                        "value": CLONE_NAMESPACE_FLAGS,
                        "valueTwo": 0,
                        "op": "SCMP_CMP_MASKED_EQ",
                    }
                ],
            },
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
            *(
                {
                    "names": ["personality"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": 0, "value": persona, "op": "SCMP_CMP_EQ"}],
                }
                for persona in PERSONAS
            ),
            {
                "names": ["socket"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}],
            },
        ],
    }
