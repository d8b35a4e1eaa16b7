package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"time"
)

// writeTgz writes upstream's static layout: a directory cri-dockerd/ holding the binary
// cri-dockerd/cri-dockerd. kubespray and other installers extract exactly that path.
// Owner root and a fixed time keep the archive the same from build to build.
func writeTgz(path, bin string, mtime time.Time) (err error) {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	zw, err := gzip.NewWriterLevel(out, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: mtime,
			Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
	}
	if err := tw.WriteHeader(hdr("cri-dockerd/", tar.TypeDir, 0o755, 0)); err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr("cri-dockerd/cri-dockerd", tar.TypeReg, 0o755, st.Size())); err != nil {
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
