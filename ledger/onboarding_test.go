package ledger

import (
	"errors"
	"testing"
	"time"
)

// TestApplicationQueueSurvivesReopen: the coordinator's queue, with its audit trail, and a
// provider's pending application come back after a restart; an update that fails changes
// nothing.
func TestApplicationQueueSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	l := openTemp(t, dir)
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	a := Application{ID: "0123456789ab", Provider: newPeer(t).String(), Status: "pending", SubmittedAt: now,
		Events: []Event{{At: now, Actor: "provider", Action: "submitted"}}}
	if err := l.Applications.PutApplication(a); err != nil {
		t.Fatal(err)
	}
	if err := l.Applications.PutApplication(a); err == nil {
		t.Fatal("an application ID taken twice")
	}
	if _, err := l.Applications.UpdateApplication(a.ID, func(a *Application) error {
		a.Status = "approved"
		return errors.New("refused")
	}); err == nil {
		t.Fatal("failed update reported success")
	}
	if _, err := l.Applications.UpdateApplication(a.ID, func(a *Application) error {
		a.Status = "info-requested"
		a.Events = append(a.Events, Event{At: now, Actor: "operator alice", Action: "info-requested", Detail: "which PSU?"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Applicant.SetOwnApplication(OwnApplication{ID: a.ID, Raw: []byte("signed"), Status: "pending"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Notifications.AddNotification(Notification{From: "coord", Seq: 7, Subject: "approved"}); err != nil {
		t.Fatal(err)
	}
	l.Close()

	l = openTemp(t, dir)
	defer l.Close()
	got, err := l.Applications.GetApplication(a.ID)
	if err != nil || got.Status != "info-requested" || len(got.Events) != 2 || got.Events[1].Detail != "which PSU?" {
		t.Fatalf("application after reopen: %+v, %v", got, err)
	}
	own, err := l.Applicant.GetOwnApplication()
	if err != nil || string(own.Raw) != "signed" || own.Delivered {
		t.Fatalf("own application after reopen: %+v, %v", own, err)
	}
	if added, _ := l.Notifications.AddNotification(Notification{From: "coord", Seq: 7, Subject: "approved"}); added {
		t.Fatal("the same notification stored twice")
	}
	if ns, _ := l.Notifications.Notifications(); len(ns) != 1 {
		t.Fatalf("%d notifications; want 1", len(ns))
	}
	if _, err := l.Applications.GetApplication("ffffffffffff"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing application: %v", err)
	}
}
