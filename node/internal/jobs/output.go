package jobs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// A job's log and output, both ends: the provider streams the log from the job's folder
// ("logs" op, and Logs for its own operator) and the tar of /output ("fetch" op), and
// deletes the folders of jobs that ended more than jobs.retention ago; the renter follows
// the log (JobLogs, which takes the receipt at the end) and fetches the output.

// The provider's end.

// streamLogs sends the job's log from the start, following it until the job ends when
// follow is set, then an end frame with the job's status (and receipt).
func (r *Runner) streamLogs(s network.Stream, id string, follow bool) {
	j, err := r.followLog(context.Background(), id, follow, func(b []byte) error {
		return sendMsg(s, protocol.JobMsg{Type: "log", Data: b})
	})
	if err != nil {
		return
	}
	sendMsg(s, protocol.JobMsg{Type: "end", Status: wireStatus(viewJob(j, r.clock.Now())), Record: j.Receipt})
}

// Logs writes the log of a job this provider runs to w, following it until the job ends
// when follow is set: the provider's operator reads it on the dashboard (the file is in
// the job's folder on this machine anyway).
func (r *Runner) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	_, err := r.followLog(ctx, id, follow, func(b []byte) error {
		_, err := w.Write(b)
		return err
	})
	return err
}

// followLog hands a job's log to write piece by piece, from its start, and, when follow is
// set, as it grows until the job ends; it returns the job as it stands then.
func (r *Runner) followLog(ctx context.Context, id string, follow bool, write func([]byte) error) (ledger.Job, error) {
	path := filepath.Join(r.jobDir(id), "log")
	var off int64
	buf := make([]byte, 16<<10) // base64 in a JSON frame: well under maxJobFrame
	for {
		j, err := r.ledger.GetJob(id)
		if err != nil {
			return j, err
		}
		ended := j.State == ledger.JobEnded || j.State == ledger.JobFailed
		if f, err := os.Open(path); err == nil {
			f.Seek(off, io.SeekStart)
			for {
				n, rerr := f.Read(buf)
				if n > 0 {
					off += int64(n)
					if err := write(buf[:n]); err != nil {
						f.Close()
						return j, err
					}
				}
				if rerr != nil {
					break
				}
			}
			f.Close()
		}
		if ended || !follow {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-r.clock.After(100 * time.Millisecond):
		}
	}
}

// writeTar writes a folder as a tar stream: regular files and folders only. The folder is
// opened as an os.Root, so that nothing the job left there (links, or a folder swapped for
// a link while the walk runs) can lead outside it.
func writeTar(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fsys := root.FS()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // links and devices stay behind
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = path
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		// The job may swap the file for another between the walk and the open: serve only
		// the very file the walk saw.
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != info.Size() {
			return fmt.Errorf("%s changed while it was read", path)
		}
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// CleanupLoop deletes, every hour and at start, the folders (log, output) of jobs that
// ended more than jobs.retention ago, and keeps the image cache within its budget.
func (r *Runner) CleanupLoop(ctx context.Context) {
	for {
		r.removeExpiredFolders()
		r.cleanInputs() // inputs.go
		if r.rt != nil {
			r.pruneImages()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(time.Hour):
		}
	}
}

// removeExpiredFolders deletes the folders of this provider's jobs that ended more than
// jobs.retention ago.
func (r *Runner) removeExpiredFolders() {
	jobs, err := r.ledger.Jobs()
	if err != nil {
		return
	}
	cutoff := r.clock.Now().Add(-r.cfg.Retention.Duration)
	for _, j := range jobs {
		if j.Side != "provider" || (j.State != ledger.JobEnded && j.State != ledger.JobFailed) || j.UpdatedAt.After(cutoff) {
			continue
		}
		dir := r.jobDir(j.ID)
		if _, err := os.Lstat(dir); err != nil {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			r.log.Warn("deleting an old job's folder failed", "job", j.ID, "err", err)
			continue
		}
		r.log.Info("deleted the folder of a job ended before the retention period", "job", j.ID, "ended", j.UpdatedAt, "retention", r.cfg.Retention)
	}
}

// The renter's end.

// JobLogs writes a job's output to w, following it until the job ends when follow is set.
// When the job has ended, the provider's receipt is checked, countersigned and kept.
func (r *Renter) JobLogs(ctx context.Context, id string, follow bool, w io.Writer) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side == "provider" {
		return api.JobView{}, api.Invalid(errors.New("this node runs the job: read its log in the job's folder"))
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "logs", Follow: follow})
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	defer s.Close()
	go func() { <-ctx.Done(); s.Reset() }()
	for {
		m, err := readMsg(in)
		if err != nil {
			return viewJob(j, r.clock.Now()), fmt.Errorf("log stream: %w", err)
		}
		switch m.Type {
		case "log":
			if _, err := w.Write(m.Data); err != nil {
				return viewJob(j, r.clock.Now()), err
			}
			if f, ok := w.(interface{ Flush() }); ok {
				f.Flush()
			}
		case "end":
			if len(m.Record) > 0 {
				if j, err = r.takeReceipt(ctx, j, m.Record); err != nil {
					return viewJob(j, r.clock.Now()), err
				}
			}
			v := viewJob(j, r.clock.Now())
			if m.Status != nil && len(m.Record) == 0 {
				v.State, v.Error = m.Status.State, m.Status.Error
			}
			return v, nil
		case "error":
			return viewJob(j, r.clock.Now()), errors.New(m.Reason)
		}
	}
}

// FetchOutput streams the tar of what the job wrote to /output.
func (r *Renter) FetchOutput(ctx context.Context, id string, w io.Writer) error {
	j, err := r.renterJob(id)
	if err != nil {
		return err
	}
	if j.Side != "renter" {
		return api.Invalid(fmt.Errorf("this node runs job %s: its output is in the job's folder", id))
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return err
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "fetch"})
	if err != nil {
		return err
	}
	defer s.Close()
	// A job's /output holds at most its scratch size (the provider kills it past that, with
	// a little overshoot); whatever a provider sends beyond twice that is refused.
	max := OutputFetchLimit(l.Limits.ScratchBytes)
	n, err := io.Copy(w, io.LimitReader(in, max+1))
	if err == nil && n > max {
		return fmt.Errorf("%w: the provider sent more than %d MB of output for a job whose /output holds at most %d MB: stopped",
			protocol.ErrTooLarge, max>>20, l.Limits.ScratchBytes>>20)
	}
	return err
}

// OutputFetchLimit is the most a renter takes when fetching the output of a job whose
// /output is bounded by scratch bytes: twice that and 64 MiB, for the overshoot a job
// makes before it is stopped and the archive's headers.
func OutputFetchLimit(scratch int64) int64 { return 2*scratch + 64<<20 }
