package procfs

import (
	"os"
	"testing"
)

func TestFields(t *testing.T) {
	in := "Name:\tmeganode\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t7\nCpus_allowed_list:\t0-1\nMemAvailable:   10 kB\nbad line\n"
	f := Fields([]byte(in))
	want := map[string]uint64{"VmHWM": 2 << 20, "VmRSS": 1 << 20, "Threads": 7, "MemAvailable": 10 << 10}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %d, want %d", k, f[k], v)
		}
	}
	for _, k := range []string{"Name", "Cpus_allowed_list", "bad line"} {
		if _, ok := f[k]; ok {
			t.Errorf("%s parsed as a number: %v", k, f)
		}
	}
}

func TestStatusAndMemInfo(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	self, err := Status(0)
	if err != nil || self["VmRSS"] == 0 || self["Threads"] == 0 {
		t.Fatalf("Status(0) = %v, %v", self, err)
	}
	byPID, err := Status(os.Getpid())
	if err != nil || byPID["VmHWM"] == 0 {
		t.Fatalf("Status(pid) = %v, %v", byPID, err)
	}
	if _, err := Status(1 << 30); err == nil {
		t.Fatal("Status of a process that does not exist: no error")
	}
	m, err := MemInfo()
	if err != nil || m["MemTotal"] == 0 || m["MemAvailable"] > m["MemTotal"] {
		t.Fatalf("MemInfo() = %v, %v", m, err)
	}
}

func TestCPUStat(t *testing.T) {
	c, err := ParseCPUStat([]byte("cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Processes() != 155 || c.Busy() != 161 || c.Total() != 1181 {
		t.Fatalf("%+v: processes %d busy %d total %d", c, c.Processes(), c.Busy(), c.Total())
	}
	if _, err := ParseCPUStat([]byte("intr 1 2 3")); err == nil {
		t.Fatal("want an error")
	}
	if _, err := ParseCPUStat([]byte("cpu 1 2 x 4 5")); err == nil {
		t.Fatal("want an error for a field that is not a number")
	}
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc here")
	}
	if c, err := ReadCPUStat(); err != nil || c.Total() == 0 {
		t.Fatalf("ReadCPUStat() = %+v, %v", c, err)
	}
}
