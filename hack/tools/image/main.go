// Command image builds the switchboard container image with neither a container engine
// nor a registry, so that it can be built and inspected wherever Go runs: `make image`
// runs it from the repository root, and its test inspects what it writes. For each
// platform it cross-compiles the static binary and puts one layer on an empty base:
//
//	/switchboard                        the binary (owned by root, mode 0755)
//	/etc/passwd, /etc/group             root and nonroot (65532), from rootfs/etc
//	/etc/ssl/certs/ca-certificates.crt  the build machine's CA bundle (-ca-certs)
//
// The image runs as 65532:65532 with the entrypoint /switchboard and no shell. It writes
// an OCI image layout (OUT/oci: an index of one image per platform, named by -image) and
// a docker-archive tarball of the first platform (OUT/switchboard.tar, for `docker load`
// or `kind load image-archive`). The repository's Dockerfile builds the same image with a
// container engine: keep the two in step.
//
// CA certificates: the runtime calls model providers over HTTPS, so the image carries the
// public root CAs. They are copied from the build machine, at the path Go's crypto/x509
// reads first on Linux (no SSL_CERT_FILE needed), as the Dockerfile copies them from its
// golang builder image: both are Debian's ca-certificates bundle, as fresh as the build
// machine's package. The image's digest therefore depends on that bundle too; -ca-certs
// names another one (with a private CA added, say).
//
// Reproducibility: file times, the image's creation time and the build date stamped into
// the binary all come from SOURCE_DATE_EPOCH (the Makefile sets the commit's time), and
// the binary is built with -trimpath and without VCS stamping, so the same commit, Go
// version and CA bundle give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// versionPkg holds the variables the linker stamps (runtime/version).
	versionPkg = "github.com/switchboard-dev/switchboard/runtime/version"
	// user runs the process: distroless's "nonroot", with no privileges anywhere.
	user = "65532:65532"
	// entrypoint is where the binary lies in the image.
	entrypoint = "/switchboard"
	// caPath is the CA bundle's path in the image, the first one crypto/x509 tries.
	caPath = "etc/ssl/certs/ca-certificates.crt"

	// Annotations of the layout's index.json naming the image (OCI image-spec
	// annotations; the containerd one carries the full reference for `ctr image import`).
	refNameAnnotation        = "org.opencontainers.image.ref.name"
	containerdNameAnnotation = "io.containerd.image.name"
)

//go:embed rootfs/etc/passwd rootfs/etc/group
var rootfs embed.FS

// config is what one run builds.
type config struct {
	source    string        // module root holding cmd/switchboard
	out       string        // output folder
	platforms []v1.Platform // one image each, the first also in the tarball
	image     string        // reference naming the image: repository:tag
	version   string        // release version, stamped and labelled
	commit    string        // git commit, stamped and labelled
	created   time.Time     // SOURCE_DATE_EPOCH
	caCerts   string        // CA bundle copied into the image
	licenses  string        // SPDX expression of the licenses label
}

func main() {
	c := config{}
	flag.StringVar(&c.source, "source", ".", "Root of the switchboard module (holding cmd/switchboard).")
	flag.StringVar(&c.out, "out", "bin/image", "Output folder: oci/ (OCI image layout) and switchboard.tar (docker-archive of the first platform).")
	platforms := flag.String("platforms", "linux/amd64", "Comma-separated os/arch list, one image each, e.g. linux/amd64,linux/arm64.")
	flag.StringVar(&c.image, "image", "ghcr.io/switchboard-dev/switchboard:0.0.0-dev", "Reference naming the image (repository:tag) in the layout and the tarball.")
	flag.StringVar(&c.version, "version", "v0.0.0-dev", "Version stamped into the binary and labelled.")
	flag.StringVar(&c.commit, "commit", "unknown", "Git commit stamped into the binary and labelled.")
	flag.StringVar(&c.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to copy into the image as /"+caPath+".")
	flag.StringVar(&c.licenses, "licenses", "NOASSERTION", "SPDX license expression of the org.opencontainers.image.licenses label.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := func() error {
		var err error
		if c.platforms, err = parsePlatforms(*platforms); err != nil {
			return err
		}
		if c.created, err = sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
			return err
		}
		return run(ctx, c, os.Stdout)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// parsePlatforms reads "linux/amd64,linux/arm64". Variants (arm/v7) are not built.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for p := range strings.SplitSeq(s, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("-platforms: %q is not os/arch", p)
		}
		out = append(out, v1.Platform{OS: osName, Architecture: arch})
	}
	return out, nil
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (seconds since 1970, the usual convention);
// unset, the image is dated at the epoch itself rather than at the time of the build.
func sourceDateEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// run builds the binaries, then the image around them.
func run(ctx context.Context, c config, stdout io.Writer) error {
	for _, v := range []string{c.version, c.commit} {
		// They travel inside -ldflags, which splits on spaces and honours quotes.
		if v == "" || strings.ContainsAny(v, " \t\n'\"") {
			return fmt.Errorf("version and commit must be single words, got %q", v)
		}
	}
	if _, err := name.NewTag(c.image, name.StrictValidation); err != nil {
		return fmt.Errorf("-image: %w", err)
	}
	if _, err := os.Stat(c.caCerts); err != nil {
		return fmt.Errorf("CA bundle (-ca-certs; Debian and Ubuntu: apt-get install ca-certificates): %w", err)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil { //nolint:gosec // G301: build output, world-readable like the rest of bin/
		return err
	}
	work, err := os.MkdirTemp(c.out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var targets []target
	for _, p := range c.platforms {
		t := target{platform: p, binary: filepath.Join(work, p.OS+"-"+p.Architecture, "switchboard")}
		if err := buildBinary(ctx, c, p, t.binary); err != nil {
			return err
		}
		targets = append(targets, t)
	}
	return assemble(c, targets, stdout)
}

// target is one platform's image and the binary built for it.
type target struct {
	platform v1.Platform
	binary   string
}

// assemble writes the images of targets (the first one also as the tarball), and replaces
// c.out's oci/ and switchboard.tar only once everything is written.
func assemble(c config, targets []target, stdout io.Writer) error {
	tag, err := name.NewTag(c.image, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-image: %w", err)
	}
	ca, err := os.ReadFile(c.caCerts)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	work, err := os.MkdirTemp(c.out, ".image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var images []v1.Image
	for _, t := range targets {
		p := t.platform
		img, sizes, err := buildImage(c, p, t.binary, ca)
		if err != nil {
			return fmt.Errorf("image for %s: %w", p, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s: layer %s compressed, %s uncompressed\n", p, digest, mib(sizes.compressed), mib(sizes.uncompressed))
		images = append(images, img)
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}

	// index.json names the multi-platform index, so that one name (skopeo's
	// oci:bin/image/oci:TAG, ctr image import) selects the image for any platform.
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: index, Descriptor: v1.Descriptor{
		Annotations: map[string]string{refNameAnnotation: tag.TagStr(), containerdNameAnnotation: tag.Name()},
	}})
	if _, err := layout.Write(filepath.Join(work, "oci"), top); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := readableByAll(filepath.Join(work, "oci")); err != nil {
		return err
	}
	if err := tarball.WriteToFile(filepath.Join(work, "switchboard.tar"), tag, images[0]); err != nil {
		return fmt.Errorf("write tarball: %w", err)
	}
	for _, f := range []string{"oci", "switchboard.tar"} {
		if err := os.RemoveAll(filepath.Join(c.out, f)); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(work, f), filepath.Join(c.out, f)); err != nil {
			return err
		}
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n  OCI layout: %s\n  tarball (%s): %s\n", tag, digest,
		filepath.Join(c.out, "oci"), targets[0].platform, filepath.Join(c.out, "switchboard.tar"))
	return nil
}

// ldflags stamps runtime/version and strips the symbol table and DWARF, as the Dockerfile.
func ldflags(c config) string {
	return strings.Join([]string{
		"-s", "-w",
		"-X", versionPkg + ".version=" + c.version,
		"-X", versionPkg + ".commit=" + c.commit,
		"-X", versionPkg + ".date=" + c.created.UTC().Format(time.RFC3339),
	}, " ")
}

// buildBinary cross-compiles the static switchboard binary for p into dst.
func buildBinary(ctx context.Context, c config, p v1.Platform, dst string) error {
	//nolint:gosec // G204: go build of this repository, with the tool's own flags
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(c), "-o", dst, "./cmd/switchboard")
	cmd.Dir = c.source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", p, err)
	}
	return nil
}

// layerSizes are the sizes of the image's one layer, for the report.
type layerSizes struct{ compressed, uncompressed int64 }

// buildImage assembles the image of one platform around its binary.
func buildImage(c config, p v1.Platform, binary string, ca []byte) (v1.Image, layerSizes, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, layerSizes{}, err
	}
	files := []file{
		{name: "etc/", dir: true},
		{name: "etc/group", data: mustRead("rootfs/etc/group")},
		{name: "etc/passwd", data: mustRead("rootfs/etc/passwd")},
		{name: "etc/ssl/", dir: true},
		{name: "etc/ssl/certs/", dir: true},
		{name: caPath, data: ca},
		{name: strings.TrimPrefix(entrypoint, "/"), data: bin, exec: true},
	}
	uncompressed, err := tarLayer(files, c.created)
	if err != nil {
		return nil, layerSizes{}, err
	}
	var compressed bytes.Buffer
	zw, err := gzip.NewWriterLevel(&compressed, gzip.BestCompression)
	if err != nil {
		return nil, layerSizes{}, err
	}
	if _, err := zw.Write(uncompressed); err != nil {
		return nil, layerSizes{}, err
	}
	if err := zw.Close(); err != nil {
		return nil, layerSizes{}, err
	}
	gz := compressed.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, layerSizes{}, err
	}

	created := v1.Time{Time: c.created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      created,
		Config: v1.Config{
			User:       user,
			Entrypoint: []string{entrypoint},
			WorkingDir: "/",
			Labels:     labels(c),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, layerSizes{}, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: "hack/tools/image: /switchboard, /etc/passwd, /etc/group, /" + caPath,
		},
	})
	if err != nil {
		return nil, layerSizes{}, err
	}
	return img, layerSizes{compressed: int64(len(gz)), uncompressed: int64(len(uncompressed))}, nil
}

// labels are the OCI annotations of the image config, as the Dockerfile's LABEL.
func labels(c config) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "switchboard",
		"org.opencontainers.image.description": "A Kubernetes-native execution runtime for AI models",
		"org.opencontainers.image.source":      "https://github.com/switchboard-dev/switchboard",
		"org.opencontainers.image.version":     c.version,
		"org.opencontainers.image.revision":    c.commit,
		"org.opencontainers.image.created":     c.created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses":    c.licenses,
	}
}

// file is one entry of the layer, owned by root: the process may read and run what the
// image holds but not change it, even on a writable root filesystem.
type file struct {
	name string
	data []byte
	dir  bool
	exec bool
}

// tarLayer writes files as an uncompressed layer, every entry dated mtime so that the
// layer depends only on its contents.
func tarLayer(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, ModTime: mtime, Format: tar.FormatUSTAR, Size: int64(len(f.data))}
		switch {
		case f.dir:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case f.exec:
			h.Typeflag, h.Mode = tar.TypeReg, 0o755
		default:
			h.Typeflag = tar.TypeReg
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readableByAll gives the layout's files one mode: go-containerregistry writes some blobs
// 0600 (temporary files renamed into place) and others 0755, and the layout is meant to
// be copied, archived or served.
func readableByAll(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return root.Chmod(path, mode)
	})
}

// mustRead returns an embedded rootfs file; they are part of the program.
func mustRead(path string) []byte {
	b, err := fs.ReadFile(rootfs, path)
	if err != nil {
		panic(errors.New("embedded " + path + " missing"))
	}
	return b
}

// mib formats a byte count for the report.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
