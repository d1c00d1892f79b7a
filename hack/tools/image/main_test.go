package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testConfig builds the host platform's image from this repository into a temporary
// folder, with a CA bundle the test made.
func testConfig(t *testing.T) config {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\ntest bundle\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return config{
		source:    filepath.Join("..", "..", ".."),
		out:       filepath.Join(t.TempDir(), "image"),
		platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		image:     "ghcr.io/switchboard-dev/switchboard:v9.9.9-test",
		version:   "v9.9.9-test",
		commit:    "0123456789abcdef0123456789abcdef01234567",
		created:   time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC),
		caCerts:   ca,
		licenses:  "NOASSERTION",
	}
}

// What `make image` writes (issue 10, e): an OCI layout whose one image runs the static
// binary as 65532 with the entrypoint /switchboard, carries the OCI labels, has no shell
// or any other program, and whose binary answers --version with what was stamped.
func TestImage(t *testing.T) {
	c := testConfig(t)
	var report strings.Builder
	if err := run(t.Context(), c, &report); err != nil {
		t.Fatal(err)
	}
	t.Log(report.String())

	// index.json names the image; it points at an index of one image per platform.
	top, err := layout.ImageIndexFromPath(filepath.Join(c.out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(topManifest.Manifests))
	}
	named := topManifest.Manifests[0]
	wantNames := map[string]string{refNameAnnotation: "v9.9.9-test", containerdNameAnnotation: c.image}
	if diff := cmp.Diff(wantNames, named.Annotations); named.MediaType != types.OCIImageIndex || diff != "" {
		t.Errorf("index.json entry: media type %s, annotations (-want +got):\n%s", named.MediaType, diff)
	}
	platforms, err := top.ImageIndex(named.Digest)
	if err != nil {
		t.Fatal(err)
	}
	platformManifest, err := platforms.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(platformManifest.Manifests) != 1 || !platformManifest.Manifests[0].Platform.Equals(c.platforms[0]) {
		t.Fatalf("platform index = %+v, want one image for %s", platformManifest.Manifests, c.platforms[0])
	}
	img, err := platforms.Image(platformManifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := v1.Config{
		User:       "65532:65532",
		Entrypoint: []string{"/switchboard"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "switchboard",
			"org.opencontainers.image.description": "A Kubernetes-native execution runtime for AI models",
			"org.opencontainers.image.source":      "https://github.com/switchboard-dev/switchboard",
			"org.opencontainers.image.version":     "v9.9.9-test",
			"org.opencontainers.image.revision":    c.commit,
			"org.opencontainers.image.created":     "2026-12-03T04:00:00Z",
			"org.opencontainers.image.licenses":    "NOASSERTION",
		},
	}
	if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
		t.Errorf("image config (-want +got):\n%s", diff)
	}
	if !cf.Created.Equal(c.created) || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("image created %s for %s/%s, want %s for linux/%s", cf.Created, cf.OS, cf.Architecture, c.created, runtime.GOARCH)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 on an empty base", len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %s (%v), want %s", mt, err, types.OCILayer)
	}
	compressed, err := layers[0].Size()
	if err != nil {
		t.Fatal(err)
	}

	// The filesystem: exactly these entries, all owned by root and dated SOURCE_DATE_EPOCH.
	files := map[string][]byte{}
	var listing []string
	var uncompressed int64
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		uncompressed += int64(len(data))
		files[h.Name] = data
		listing = append(listing, h.Name+" "+h.FileInfo().Mode().String())
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(c.created) {
			t.Errorf("%s: owner %d:%d, time %s; want 0:0 and %s", h.Name, h.Uid, h.Gid, h.ModTime, c.created)
		}
		if dir, base := path.Split(strings.TrimSuffix(h.Name, "/")); strings.HasPrefix(dir, "bin/") || strings.HasPrefix(dir, "usr/") ||
			base == "bin" || base == "sh" || base == "bash" || base == "busybox" {
			t.Errorf("the image has %s: no shell, no /bin", h.Name)
		}
	}
	wantListing := []string{
		"etc drwxr-xr-x",
		"etc/group -rw-r--r--",
		"etc/passwd -rw-r--r--",
		"etc/ssl drwxr-xr-x",
		"etc/ssl/certs drwxr-xr-x",
		"etc/ssl/certs/ca-certificates.crt -rw-r--r--",
		"switchboard -rwxr-xr-x",
	}
	if diff := cmp.Diff(wantListing, listing); diff != "" {
		t.Errorf("image filesystem (-want +got):\n%s", diff)
	}
	if !bytes.Contains(files["etc/passwd"], []byte("\nnonroot:x:65532:65532:")) || !bytes.Contains(files["etc/group"], []byte("\nnonroot:x:65532:\n")) {
		t.Errorf("/etc/passwd and /etc/group lack nonroot 65532:\n%s%s", files["etc/passwd"], files["etc/group"])
	}
	if ca, _ := os.ReadFile(c.caCerts); !bytes.Equal(files[caPath], ca) {
		t.Errorf("/%s = %q, want the -ca-certs bundle", caPath, files[caPath])
	}
	t.Logf("image size: layer %s compressed, %s uncompressed (binary %s)", mib(compressed), mib(uncompressed), mib(int64(len(files["switchboard"]))))

	// The binary is static and answers --version with what the build stamped.
	bin := filepath.Join(t.TempDir(), "switchboard")
	if err := os.WriteFile(bin, files["switchboard"], 0o700); err != nil { //nolint:gosec // G306: the test runs this binary
		t.Fatal(err)
	}
	assertStatic(t, bin)
	if runtime.GOOS == "linux" {
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("switchboard --version: %v", err)
		}
		want := "switchboard v9.9.9-test (commit " + c.commit + ", built 2026-12-03T04:00:00Z, go1."
		if !strings.HasPrefix(string(out), want) {
			t.Errorf("switchboard --version = %q, want it to start with %q", out, want)
		}
	}

	// The tarball holds the same image under its name, for `docker load`.
	tag, err := name.NewTag(c.image)
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(filepath.Join(c.out, "switchboard.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	assertSameImage(t, img, fromTar)

	// Reproducible: the same binary (Go's -trimpath build is reproducible) and inputs give
	// the same layout, written again in place.
	first, err := os.ReadFile(filepath.Join(c.out, "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := assemble(c, []target{{platform: c.platforms[0], binary: bin}}, io.Discard); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(c.out, "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("a rebuild changed index.json:\n%s\n%s", first, second)
	}
	if entries, _ := os.ReadDir(c.out); len(entries) != 2 {
		t.Errorf("output folder holds %v, want oci and switchboard.tar only", entries)
	}
}

// assertStatic fails unless bin is an ELF executable that needs no dynamic loader.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("/switchboard is dynamically linked (%s)", p.Type)
		}
	}
}

// assertSameImage compares what two readings of one image must share: config and layers.
func assertSameImage(t *testing.T, want, got v1.Image) {
	t.Helper()
	digests := func(img v1.Image) []string {
		config, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		out := []string{config.String()}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.String())
		}
		return out
	}
	if diff := cmp.Diff(digests(want), digests(got)); diff != "" {
		t.Errorf("tarball image differs from the layout's (config, layers; -want +got):\n%s", diff)
	}
}

// Bad input is refused before anything is built or written.
func TestRunRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config)
		want   string
	}{
		{"no CA bundle", func(c *config) { c.caCerts = filepath.Join(t.TempDir(), "missing.crt") }, "-ca-certs"},
		{"image without tag", func(c *config) { c.image = "ghcr.io/switchboard-dev/switchboard" }, "-image"},
		{"version with a space", func(c *config) { c.version = "v1 -X main.evil=1" }, "single words"},
		{"empty commit", func(c *config) { c.commit = "" }, "single words"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t)
			tc.change(&c)
			err := run(t.Context(), c, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error mentioning %q", err, tc.want)
			}
			if _, err := os.Stat(c.out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("output folder created (%v) for refused input", err)
			}
		})
	}
}

func TestParsePlatforms(t *testing.T) {
	got, err := parsePlatforms("linux/amd64, linux/arm64")
	want := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("parsePlatforms: %v (-want +got):\n%s", err, diff)
	}
	for _, bad := range []string{"", "linux", "linux/arm/v7", "/amd64", "linux/amd64,"} {
		if _, err := parsePlatforms(bad); err == nil {
			t.Errorf("parsePlatforms(%q) accepted", bad)
		}
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for in, want := range map[string]time.Time{
		"":           time.Unix(0, 0).UTC(),
		"1796270400": time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC),
	} {
		if got, err := sourceDateEpoch(in); err != nil || !got.Equal(want) {
			t.Errorf("sourceDateEpoch(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1", "1.5"} {
		if _, err := sourceDateEpoch(bad); err == nil {
			t.Errorf("sourceDateEpoch(%q) accepted", bad)
		}
	}
}
