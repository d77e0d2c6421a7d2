package qdisc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
)

// Journal is what a controller changed on its hosts, written before it changes
// anything, so that `bloatbench restore` can put the hosts back after a controller
// that was killed.
type Journal struct {
	Version   int                        `json:"version"`
	PID       int                        `json:"pid"`
	Created   time.Time                  `json:"created"`
	Setup     string                     `json:"setup"`
	Inventory string                     `json:"inventory"`
	Hosts     map[string]*inventory.Host `json:"hosts"` // enough to reconnect without the inventory
	States    []*State                   `json:"states"`
	path      string
}

// JournalDir is where journals live: $XDG_STATE_HOME/bloatbench/journal, or
// ~/.local/state/bloatbench/journal.
func JournalDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "bloatbench", "journal")
}

// Save writes the journal to dir (once, creating the file) or rewrites it.
func (j *Journal) Save(dir string) error {
	if j.path == "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create journal folder: %w", err)
		}
		j.path = filepath.Join(dir, fmt.Sprintf("%s-%d.json", j.Created.UTC().Format("20060102T150405.000000"), j.PID))
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	return nil
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Remove deletes the journal: its hosts are as they were.
func (j *Journal) Remove() error {
	if j.path == "" {
		return nil
	}
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove journal: %w", err)
	}
	return nil
}

// LoadJournal reads a journal file.
func LoadJournal(path string) (*Journal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if j.Version != 1 {
		return nil, fmt.Errorf("journal %s: version %d is not one this bloatbench reads", path, j.Version)
	}
	j.path = path
	return &j, nil
}

// Journals lists the journal files in dir, oldest first.
func Journals(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	return files, nil
}
