package doctor

import (
	"testing"
	"testing/fstest"
)

const selfLimits = `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max processes             96365                96365                processes 
Max open files            20000                524288               files     
Max locked memory         8388608              8388608              bytes     
Max msgqueue size         819200               819200               bytes     
`

func fakeHost() fstest.MapFS {
	m := fstest.MapFS{
		"proc/self/limits":                           {Data: []byte(selfLimits)},
		"proc/4242/limits":                           {Data: []byte(selfLimits)},
		"sys/devices/system/cpu/online":              {Data: []byte("0-3,8,10-11\n")},
		"proc/sys/kernel/osrelease":                  {Data: []byte("5.15.0-105-generic\n")},
		"proc/sys/net/ipv4/ip_local_port_range":      {Data: []byte("32768\t60999\n")},
		"proc/sys/net/ipv4/neigh/default/gc_thresh1": {Data: []byte("128\n")},
		"proc/sys/net/ipv4/neigh/default/gc_thresh2": {Data: []byte("512\n")},
		"proc/sys/net/ipv4/neigh/default/gc_thresh3": {Data: []byte("1024\n")},
		"proc/sys/net/netfilter/nf_conntrack_max":    {Data: []byte("262144\n")},
		"proc/sys/fs/nr_open":                        {Data: []byte("1048576\n")},
	}
	return m
}

func TestGather(t *testing.T) {
	f, err := Gather(fakeHost(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.CPUs != 7 {
		t.Errorf("CPUs = %d, want 7 (0-3,8,10-11)", f.CPUs)
	}
	if f.KernelRelease != "5.15.0-105-generic" {
		t.Errorf("kernel = %q", f.KernelRelease)
	}
	if got := f.Sysctl["net.ipv4.ip_local_port_range"]; got != "32768 60999" {
		t.Errorf("port range normalised to %q", got)
	}
	if _, ok := f.Sysctl["net.ipv6.neigh.default.gc_thresh1"]; ok {
		t.Error("absent ipv6 key reported present")
	}
	if _, ok := f.Sysctl["kernel.osrelease"]; ok {
		t.Error("osrelease should move to KernelRelease")
	}
	if f.NoFile == nil || f.NoFile.Soft != 20000 || f.NoFile.Hard != 524288 {
		t.Errorf("nofile = %+v", f.NoFile)
	}
	if f.NProc == nil || f.NProc.Soft != 96365 {
		t.Errorf("nproc = %+v", f.NProc)
	}
	if v, ok := f.sysctlUint("net.netfilter.nf_conntrack_max"); !ok || v != 262144 {
		t.Errorf("conntrack max = %d, %v", v, ok)
	}
	if _, err := Gather(fakeHost(), 4242); err != nil {
		t.Errorf("limits of pid 4242: %v", err)
	}
	if _, err := Gather(fakeHost(), 999); err == nil {
		t.Error("limits of a missing pid should fail")
	}
}

func TestGatherRealHost(t *testing.T) {
	f, err := Gather(HostFS(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.KernelRelease == "" || f.CPUs < 1 || f.NoFile == nil {
		t.Errorf("real host facts incomplete: %+v", f)
	}
	if _, ok := f.Sysctl["net.core.somaxconn"]; !ok {
		t.Error("net.core.somaxconn not read from /proc")
	}
}

func TestParseLimitsUnlimited(t *testing.T) {
	l, err := ParseLimits([]byte("Limit                     Soft Limit           Hard Limit           Units     \nMax processes             unlimited            unlimited            processes \n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := l["Max processes"]; got.Soft != Unlimited || got.Hard != Unlimited || got.String() != "unlimited/unlimited" {
		t.Errorf("got %+v", got)
	}
	if _, err := ParseLimits([]byte("Max processes             many                 unlimited            processes \n")); err == nil {
		t.Error("bad value accepted")
	}
}

func TestCountCPUList(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
		bad  bool
	}{{"0", 1, false}, {"0-1", 2, false}, {"0-3,8,10-11", 7, false}, {"", 0, false}, {"3-1", 0, true}, {"x", 0, true}} {
		got, err := CountCPUList(c.s)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("CountCPUList(%q) = %d, %v", c.s, got, err)
		}
	}
}

func TestKernelVersion(t *testing.T) {
	for _, c := range []struct {
		rel        string
		maj, minor int
		bad        bool
	}{
		{"6.18.44-fc-v669", 6, 18, false},
		{"5.15.0-105-generic", 5, 15, false},
		{"5.13", 5, 13, false},
		{"4.19.0+", 4, 19, false},
		{"6", 0, 0, true},
		{"", 0, 0, true},
		{"linux", 0, 0, true},
	} {
		maj, mnr, err := KernelVersion(c.rel)
		if (err != nil) != c.bad || maj != c.maj || mnr != c.minor {
			t.Errorf("KernelVersion(%q) = %d.%d, %v", c.rel, maj, mnr, err)
		}
	}
}
