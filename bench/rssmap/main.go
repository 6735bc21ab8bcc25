// Command rssmap tells which Go modules the resident pages of a running Go program belong
// to: it reads /proc/PID/maps and /proc/PID/pagemap (the present bit of each page; root
// needed for other users' processes), maps each resident page of the executable's own
// mappings to the symbols of /proc/PID/exe that lie in it, and each symbol to its module
// (a dependency of the build, the main module, or a standard library package tree).
//
//	rssmap -pid PID [-by module|package] [-metrics http://127.0.0.1:21880/metrics] [-top 25]
//
// A page is split between the symbols in it by their bytes; bytes no symbol covers are
// charged to their section (.gopclntab, the function tables, is the big one). With
// -metrics, the anonymous RSS is split into the Go heap and stacks the runtime reports
// and the rest. Figures are KiB.
package main

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	pid := flag.Int("pid", 0, "process to map")
	by := flag.String("by", "module", "group by module or package")
	metricsURL := flag.String("metrics", "", "Prometheus endpoint of the process, for the heap and stack figures")
	top := flag.Int("top", 30, "rows to print (the rest is summed in one row)")
	flag.Parse()
	if *pid == 0 || (*by != "module" && *by != "package") {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*pid, *by, *metricsURL, *top, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rssmap:", err)
		os.Exit(1)
	}
}

// A mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string
	offset     uint64
	path       string
}

// A class is what a byte of the executable holds: code, read-only data or writable data.
type class int

const (
	text class = iota
	rodata
	data
	nclass
)

// A section is an allocated ELF section with its class.
type section struct {
	name       string
	start, end uint64
	class      class
}

// A symbol is a named range of the executable, charged to group.
type symbol struct {
	start, end uint64
	group      string
}

func run(pid int, by, metricsURL string, top int, w io.Writer) error {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	f, err := elf.Open(exe)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return fmt.Errorf("%s is %v: only a non-PIE executable is mapped at its link addresses", exe, f.Type)
	}
	var secs []section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 {
			continue
		}
		c := rodata
		switch {
		case s.Flags&elf.SHF_EXECINSTR != 0:
			c = text
		case s.Flags&elf.SHF_WRITE != 0:
			c = data
		}
		secs = append(secs, section{s.Name, s.Addr, s.Addr + s.Size, c})
	}
	groupOf, err := grouper(exe, by)
	if err != nil {
		return err
	}
	syms, err := symbols(f, secs, groupOf)
	if err != nil {
		return err
	}

	maps, err := readMaps(pid)
	if err != nil {
		return err
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return err
	}
	defer pm.Close()

	page := uint64(os.Getpagesize())
	lo, hi := secs[0].start, secs[0].end
	for _, s := range secs {
		lo, hi = min(lo, s.start), max(hi, s.end)
	}
	kib := map[string]*[nclass]float64{}
	add := func(g string, c class, n uint64) {
		if kib[g] == nil {
			kib[g] = new([nclass]float64)
		}
		kib[g][c] += float64(n) / 1024
	}
	var total [nclass]float64
	var binResident uint64
	for _, m := range maps {
		a, b := max(m.start, lo&^(page-1)), min(m.end, hi)
		if a >= b {
			continue
		}
		present, err := residentPages(pm, a, b, page)
		if err != nil {
			return err
		}
		for _, p := range present {
			binResident += page
			pend := p + page
			for _, s := range secs {
				sa, sb := max(p, s.start), min(pend, s.end)
				if sa >= sb {
					continue
				}
				total[s.class] += float64(sb-sa) / 1024
				covered := uint64(0)
				if s.name == ".gopclntab" { // one table for all functions: no symbols in it
					add("(.gopclntab)", s.class, sb-sa)
					continue
				}
				i := sort.Search(len(syms), func(i int) bool { return syms[i].end > sa })
				for ; i < len(syms) && syms[i].start < sb; i++ {
					x, y := max(sa, syms[i].start), min(sb, syms[i].end)
					if x < y {
						add(syms[i].group, s.class, y-x)
						covered += y - x
					}
				}
				if covered < sb-sa {
					add("("+s.name+")", s.class, sb-sa-covered)
				}
			}
		}
	}

	rows := make([]string, 0, len(kib))
	for g := range kib {
		rows = append(rows, g)
	}
	sum := func(g string) float64 { v := kib[g]; return v[text] + v[rodata] + v[data] }
	sort.Slice(rows, func(i, j int) bool { return sum(rows[i]) > sum(rows[j]) })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\ttext\trodata\tdata+bss\ttotal KiB\t\n", by)
	var rest [nclass]float64
	for i, g := range rows {
		v := kib[g]
		if i >= top {
			for c := range nclass {
				rest[c] += v[c]
			}
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t\n", g, v[text], v[rodata], v[data], sum(g))
	}
	if len(rows) > top {
		fmt.Fprintf(tw, "(%d more)\t%.0f\t%.0f\t%.0f\t%.0f\t\n", len(rows)-top, rest[text], rest[rodata], rest[data], rest[text]+rest[rodata]+rest[data])
	}
	fmt.Fprintf(tw, "binary, resident\t%.0f\t%.0f\t%.0f\t%.0f\t\n", total[text], total[rodata], total[data], total[text]+total[rodata]+total[data])
	tw.Flush()

	return anon(w, pid, binResident, lo, hi, metricsURL)
}

// anon prints the process's RSS split: the executable's resident pages, the anonymous
// rest, and (with metricsURL) the Go heap and stacks within it.
func anon(w io.Writer, pid int, binResident, lo, hi uint64, metricsURL string) error {
	roll, err := kv(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nVmRSS %d KiB (Pss %d): Rss file %d (of which the binary's own %d), anonymous %d (Pss_Anon %d)\n",
		roll["Rss"], roll["Pss"], roll["Rss"]-roll["Anonymous"], binResident/1024, roll["Anonymous"], roll["Pss_Anon"])
	if metricsURL == "" {
		return nil
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.HasPrefix(f[0], "go_memstats_") {
			m[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	heap := m["go_memstats_heap_inuse_bytes"] / 1024
	idle := (m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"]) / 1024
	stack := m["go_memstats_stack_inuse_bytes"] / 1024
	other := float64(roll["Anonymous"]) - heap - idle - stack
	fmt.Fprintf(w, "anonymous: Go heap in use %.0f, heap idle not released %.0f, stacks %.0f, rest (runtime metadata, the binary's written data+bss) %.0f KiB\n",
		heap, idle, stack, other)
	return nil
}

// kv reads a file of "Key: value kB" lines.
func kv(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasSuffix(f[0], ":") {
			out[strings.TrimSuffix(f[0], ":")], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return out, nil
}

// residentPages returns the addresses of the pages in [a, b) whose pagemap entry has the
// present bit (63) set.
func residentPages(pm *os.File, a, b, page uint64) ([]uint64, error) {
	a &^= page - 1
	n := (b - a + page - 1) / page
	buf := make([]byte, 8*n)
	if _, err := pm.ReadAt(buf, int64(a/page*8)); err != nil {
		return nil, fmt.Errorf("pagemap: %w", err)
	}
	var out []uint64
	for i := range n {
		if binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0 {
			out = append(out, a+i*page)
		}
	}
	return out, nil
}

func readMaps(pid int) ([]mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	var out []mapping
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		se := strings.SplitN(f[0], "-", 2)
		var m mapping
		m.start, _ = strconv.ParseUint(se[0], 16, 64)
		m.end, _ = strconv.ParseUint(se[1], 16, 64)
		m.perms = f[1]
		m.offset, _ = strconv.ParseUint(f[2], 16, 64)
		if len(f) >= 6 {
			m.path = f[5]
		}
		out = append(out, m)
	}
	return out, nil
}

// symbols returns the executable's data and code symbols sorted by address, each ending
// where the next begins when the table gives it no size.
func symbols(f *elf.File, secs []section, groupOf func(string) string) ([]symbol, error) {
	es, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	var out []symbol
	for _, s := range es {
		t := elf.ST_TYPE(s.Info)
		if (t != elf.STT_FUNC && t != elf.STT_OBJECT) || s.Value == 0 {
			continue
		}
		out = append(out, symbol{s.Value, s.Value + s.Size, groupOf(s.Name)})
	}
	// At one address, a size-0 runtime marker (runtime.types, runtime.rodata) gives way
	// to the linker's block there (type:*), which then covers the range.
	marker := func(s symbol) bool { return s.end == s.start && s.group == "std: runtime" }
	sort.Slice(out, func(i, j int) bool {
		if out[i].start != out[j].start {
			return out[i].start < out[j].start
		}
		return marker(out[i]) && !marker(out[j])
	})
	kept := out[:0]
	for i, s := range out {
		if i+1 < len(out) && out[i+1].start == s.start && marker(s) {
			continue
		}
		kept = append(kept, s)
	}
	out = kept
	for i := range out {
		if out[i].end > out[i].start {
			continue
		}
		end := out[i].start + 1
		if i+1 < len(out) {
			end = max(end, out[i+1].start)
		}
		for _, s := range secs { // not past the symbol's own section
			if out[i].start >= s.start && out[i].start < s.end {
				end = min(end, s.end)
			}
		}
		out[i].end = end
	}
	return out, nil
}

// grouper returns the function that names a symbol's module (or package, with by package).
func grouper(exe, by string) (func(string) string, error) {
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		return nil, err
	}
	mods := []string{bi.Main.Path}
	for _, d := range bi.Deps {
		mods = append(mods, d.Path)
	}
	// Longest first: github.com/x/y/v2 before github.com/x/y.
	sort.Slice(mods, func(i, j int) bool { return len(mods[i]) > len(mods[j]) })
	return func(name string) string {
		pkg := packageOf(name)
		if pkg == "" { // type:*, go:func.*, go:string.*: one symbol each for the whole binary
			return "(" + strings.SplitN(name, ".", 2)[0] + ")"
		}
		if by == "package" {
			return pkg
		}
		for _, m := range mods {
			if pkg == m || strings.HasPrefix(pkg, m+"/") {
				return m
			}
		}
		first := strings.SplitN(pkg, "/", 2)[0]
		if !strings.Contains(first, ".") {
			return "std: " + first
		}
		return pkg
	}, nil
}

// packageOf returns the import path of the package a Go symbol belongs to, or "" for the
// linker's own symbols (type:*, go:string.*, go:func.*).
func packageOf(name string) string {
	name = strings.TrimLeft(strings.TrimPrefix(name, "go:itab."), "*") // an itab: its type's package
	if strings.HasPrefix(name, "go:") || strings.HasPrefix(name, "type:") || strings.HasPrefix(name, "go.") {
		return ""
	}
	name = strings.TrimPrefix(name, ".gcmask.")
	if i := strings.IndexByte(name, '['); i >= 0 { // a generic instance: its package is the generic's
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return ""
	}
	return name[:slash+1+dot]
}
