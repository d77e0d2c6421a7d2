package qdisc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The identity script run by a real sh, its files moved to a scratch folder: a
// machine-id names the host; an empty one (an image made for a first boot, as the
// VM lab's guests are) falls back to dbus's, then to the boot_id, so that two VMs
// whose initial network namespaces share an inode are still two hosts.
func TestIdentityScript(t *testing.T) {
	for _, c := range []struct {
		name                    string
		machineID, dbusID, boot string
		want                    string
	}{
		{"machine-id", "abc123\n", "", "b-1\n", "abc123"},
		{"an empty machine-id, dbus's", "", "d456\n", "b-1\n", "d456"},
		{"neither: the boot_id", "", "", "0f1e-77\n", "boot-0f1e-77"},
		{"no machine-id file at all", "-", "-", "0f1e-78\n", "boot-0f1e-78"},
		{"nothing", "-", "-", "-", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			script := identityScript
			paths := map[string]string{}
			for name, content := range map[string]string{"machine-id": c.machineID, "dbus-machine-id": c.dbusID, "boot_id": c.boot} {
				path := filepath.Join(dir, name)
				paths[name] = path
				if content != "-" {
					if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				switch name {
				case "machine-id":
					script = strings.ReplaceAll(script, "/etc/machine-id", path)
				case "dbus-machine-id":
					script = strings.ReplaceAll(script, "/var/lib/dbus/machine-id", path)
				default:
					script = strings.ReplaceAll(script, "/proc/sys/kernel/random/boot_id", path)
				}
			}
			out, err := exec.Command("sh", "-c", script).Output()
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			if lines[0] != c.want {
				t.Errorf("identity %q, want %q (output %q)", lines[0], c.want, out)
			}
			if len(lines) != 2 || !strings.HasPrefix(lines[1], "net:[") {
				t.Errorf("no network namespace in %q", out)
			}
			// The agent's own reading (its hello) names the host alike.
			script = strings.Join(strings.Fields(string(out)), " ")
			if got, err := identityFrom(paths["machine-id"], paths["dbus-machine-id"], paths["boot_id"]); got != script || err != nil {
				t.Errorf("IdentityHere's reading %q (%v), the script's %q", got, err, script)
			}
		})
	}
}
