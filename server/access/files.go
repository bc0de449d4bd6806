package access

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// watched is a file parsed into a T, parsed again when its modification
// time or size changes (looked at on each use) or on reload. A read or
// parse that fails keeps the T before it. A file rewritten in place (not
// renamed into place) is empty for a moment, and may change while read:
// a read during which the file changed is made again, and an empty file
// where the one in force was not is taken only once it has stood for
// emptyGrace; until then the T before it stays.
type watched[T any] struct {
	path  string
	what  string // what it holds, for the log: "users of the htpasswd file"
	parse func([]byte) (*T, error)
	log   *slog.Logger
	// now reads the clock an empty file's age goes by (the file system's,
	// time.Now); afterRead, when set, runs after each read (tests).
	now       func() time.Time
	afterRead func()
	mu        sync.Mutex            // held while reading the file
	seen      atomic.Pointer[stamp] // the state of the file last dealt with
	val       atomic.Pointer[T]
	nonEmpty  bool // under mu: the content in force was not empty
}

// stamp is a file's state as a stat tells it, or the stat's error.
type stamp struct {
	mod, size int64
	err       string
}

// stateOf stats path.
func stateOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: err.Error()}
	}
	return stampOf(fi)
}

// emptyGrace is how long an empty file must stand, where the one before
// was not, before it is taken: longer than a rewrite in place takes.
const emptyGrace = time.Second

// errPending is a read that is not taken yet: the file changed while read
// or is freshly empty. The next use reads it again.
var errPending = errors.New("the file is being rewritten")

// watch reads path into a watched file; the first read must succeed.
func watch[T any](path, what string, parse func([]byte) (*T, error), log *slog.Logger) (*watched[T], error) {
	w := &watched[T]{path: path, what: what, parse: parse, log: log, now: time.Now}
	if err := w.reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// current returns the file's T, parsing it again first if it changed. A
// file that fails to read or parse, or is gone, is logged once per state.
func (w *watched[T]) current() *T {
	if w.path == "" {
		return w.val.Load()
	}
	if st := w.seen.Load(); st == nil || *st != stateOf(w.path) {
		if err := w.load(false); err != nil && !errors.Is(err, errPending) {
			w.log.Error("access: keeping the "+w.what+" in force", "file", w.path, "err", err)
		}
	}
	return w.val.Load()
}

// reload reads the file whatever its state (SIGHUP); a read not taken yet
// is no error.
func (w *watched[T]) reload() error {
	if err := w.load(true); !errors.Is(err, errPending) {
		return err
	}
	return nil
}

// load reads and parses the file, unless (without force) another use
// dealt with its state meanwhile.
func (w *watched[T]) load(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	state := stateOf(w.path)
	if st := w.seen.Load(); !force && st != nil && *st == state {
		return nil
	}
	var (
		b   []byte
		st  stamp
		err error
	)
	for range 3 {
		if b, st, err = w.read(); !errors.Is(err, errPending) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, errPending) {
			return err
		}
		// Logged once: this state is dealt with until the file changes.
		w.seen.Store(&state)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s is gone: %w", w.path, err)
		}
		return err
	}
	empty := len(bytes.TrimSpace(b)) == 0
	if empty && w.nonEmpty && w.now().Sub(time.Unix(0, st.mod)) < emptyGrace {
		return errPending
	}
	w.seen.Store(&st)
	v, err := w.parse(b)
	if err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	w.val.Store(v)
	w.nonEmpty = !empty
	return nil
}

// read reads the file whole: errPending when it changed while read.
func (w *watched[T]) read() ([]byte, stamp, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, stamp{}, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, stamp{}, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("%s: %w", w.path, err)
	}
	if w.afterRead != nil {
		w.afterRead()
	}
	after, err := os.Stat(w.path)
	if err != nil || !os.SameFile(before, after) || stampOf(before) != stampOf(after) || int64(len(b)) != before.Size() {
		return nil, stamp{}, errPending
	}
	return b, stampOf(before), nil
}

func stampOf(fi os.FileInfo) stamp { return stamp{mod: fi.ModTime().UnixNano(), size: fi.Size()} }

// userFile is the htpasswd file, or none.
type userFile struct {
	file *watched[htpasswd]
	// seen remembers passwords that matched, by an HMAC of the user,
	// the hash and the password under a key of this process, so that a
	// client sending Basic on every request pays for bcrypt once. A
	// changed hash or a removed user no longer matches.
	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
	key  []byte
}

// maxSeen bounds userFile.seen: it is emptied when full.
const maxSeen = 4096

type htpasswd struct {
	hashes map[string][]byte
	// dummy is compared against for an unknown user, at the cost most of
	// the file's hashes have (mostCommonCost), so that it takes as long as
	// a wrong password of those users. A user at another cost takes
	// another time, which tells that name is known: keep one cost in a
	// file (stead user add keeps the file's, HashCost).
	dummy []byte
}

func openUsers(path string, log *slog.Logger) (*userFile, error) {
	u := &userFile{seen: map[[sha256.Size]byte]struct{}{}, key: make([]byte, 32)}
	rand.Read(u.key)
	if path == "" {
		u.file = &watched[htpasswd]{}
		u.file.val.Store(&htpasswd{hashes: map[string][]byte{}}) // no users to tell apart
		return u, nil
	}
	var err error
	u.file, err = watch(path, "users of the htpasswd file", parseHtpasswd, log)
	return u, err
}

func dummyHash(cost int) []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("not a password anyone has"), cost)
	return h
}

// parseHtpasswd reads "user:bcrypt-hash" lines; blank lines and lines
// starting with # are skipped.
func parseHtpasswd(b []byte) (*htpasswd, error) {
	h := &htpasswd{hashes: map[string][]byte{}}
	costs := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		if err := checkUserName(name); err != nil || !ok {
			return nil, fmt.Errorf("line %d: want user:hash with a user name (%v)", n, err)
		}
		c, err := bcrypt.Cost([]byte(hash))
		if err != nil || !strings.HasPrefix(hash, "$2") {
			return nil, fmt.Errorf("line %d: user %q: the hash is not bcrypt: create it with htpasswd -B or stead user add", n, name)
		}
		if _, dup := h.hashes[name]; dup {
			return nil, fmt.Errorf("line %d: user %q is listed twice", n, name)
		}
		h.hashes[name] = []byte(hash)
		costs[c]++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(h.hashes) > 0 { // with no user, there is no name to tell apart
		h.dummy = dummyHash(mostCommonCost(costs))
	}
	return h, nil
}

// mostCommonCost is the bcrypt cost most hashes of counts (cost to
// number) have, the higher on a tie; bcrypt.DefaultCost for none.
func mostCommonCost(counts map[int]int) int {
	best, n := bcrypt.DefaultCost, 0
	for c, k := range counts {
		if k > n || k == n && c > best {
			best, n = c, k
		}
	}
	return best
}

// HashCost is the bcrypt cost most hashes of an htpasswd file's content
// have, bcrypt.DefaultCost for none: the cost a user added to it gets, so
// that the file keeps one cost and an unknown name is compared against a
// dummy of that cost. Lines it cannot read are left out.
func HashCost(file []byte) int {
	counts := map[int]int{}
	for _, line := range strings.Split(string(file), "\n") {
		if _, hash, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.HasPrefix(hash, "$2") {
			if c, err := bcrypt.Cost([]byte(hash)); err == nil {
				counts[c]++
			}
		}
	}
	return mostCommonCost(counts)
}

// checkUserName refuses the names access rules give a meaning of their
// own, and those an htpasswd line cannot hold as one name: with a control
// character (a newline would make two lines), white space, a colon, or a
// leading # (a comment).
func checkUserName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty user name")
	case name == TokenIdentity || name == anonymousName || name == everyone || strings.HasPrefix(name, "@"):
		return fmt.Errorf("the user name %q is reserved", name)
	case strings.HasPrefix(name, "#"):
		return fmt.Errorf("user name %q starts with #, which makes its line a comment", name)
	case strings.Contains(name, ":"):
		return fmt.Errorf("user name %q has a colon", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError }) >= 0:
		return fmt.Errorf("user name %q has white space, a control character or invalid UTF-8", name)
	}
	return nil
}

// check reports whether pass is name's password. An unknown user is
// compared against the dummy hash: it takes as long, and fails.
func (u *userFile) check(name, pass string) bool {
	h := u.file.current()
	hash, ok := h.hashes[name]
	if !ok {
		if h.dummy == nil {
			return false
		}
		hash = h.dummy
	}
	m := hmac.New(sha256.New, u.key)
	fmt.Fprintf(m, "%s\x00%s\x00%s", name, hash, pass)
	var k [sha256.Size]byte
	m.Sum(k[:0])
	u.mu.Lock()
	_, seen := u.seen[k]
	u.mu.Unlock()
	if seen && ok {
		return true
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil || !ok {
		return false
	}
	u.mu.Lock()
	if len(u.seen) >= maxSeen {
		clear(u.seen)
	}
	u.seen[k] = struct{}{}
	u.mu.Unlock()
	return true
}

// has reports whether name is a user of the file in force.
func (u *userFile) has(name string) bool {
	_, ok := u.file.current().hashes[name]
	return ok
}

// fingerprint names name's password hash, so that a refresh token dies
// when its user's password changes; "" for no such user.
func (u *userFile) fingerprint(name string) string {
	hash, ok := u.file.current().hashes[name]
	if !ok {
		return ""
	}
	m := hmac.New(sha256.New, []byte("stead refresh"))
	m.Write(hash)
	return fmt.Sprintf("%x", m.Sum(nil)[:16])
}

func (u *userFile) reload() error {
	if u.file.path == "" {
		return nil
	}
	return u.file.reload()
}

// HashPassword returns an htpasswd line for name and password, with a
// bcrypt hash of cost (HashCost of the file it goes into).
func HashPassword(name, password string, cost int) (string, error) {
	if err := checkUserName(name); err != nil {
		return "", err
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		return "", err
	}
	return name + ":" + string(h), nil
}
