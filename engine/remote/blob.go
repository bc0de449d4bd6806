package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/wire"
)

type blobs struct{ e *Engine }

// Put uploads the value, pinned for p.Owner and p.TTL from p.Now (zero:
// the server's clock): the server takes exactly the pin asked for, so the
// portable store's hot-key skip, which trusts its own pin deadlines, stays
// safe over HTTP.
func (b *blobs) Put(ctx context.Context, p blob.PutParams) error {
	q := query("now", timeText(p.Now))
	q.Set("owner", p.Owner) // even empty: the server refuses it rather than pin as itself
	q.Set("ttl", p.TTL.String())
	req := &request{body: bytes.NewReader(p.Value), query: q}
	_, err := b.e.do(ctx, http.MethodPut, "/v1/blobs/"+p.Key.String(), req, nil, nil)
	return err
}

func (b *blobs) Get(ctx context.Context, key blob.Key) ([]byte, error) {
	resp, err := b.e.send(ctx, http.MethodGet, "/v1/blobs/"+key.String(), nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorOf(resp)
	}
	value := make([]byte, 0, max(resp.ContentLength, 0))
	buf := bytes.NewBuffer(value)
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, fmt.Errorf("remote: blob %s: %w", key, err)
	}
	if resp.ContentLength >= 0 && int64(buf.Len()) != resp.ContentLength {
		return nil, fmt.Errorf("remote: blob %s: %w", key, io.ErrUnexpectedEOF)
	}
	return buf.Bytes(), nil
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	resp, err := b.e.do(ctx, http.MethodHead, "/v1/blobs/"+key.String(), nil, nil, nil)
	if err != nil {
		return blob.Info{}, err
	}
	size, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil {
		return blob.Info{}, fmt.Errorf("remote: blob %s: no size in the answer", key)
	}
	return blob.Info{Key: key, Size: size}, nil
}

// List reads one streamed answer, so the listing is one snapshot on the
// server and memory stays flat however many blobs it holds.
func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	afterText := ""
	if !after.IsZero() {
		afterText = after.String()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a yield that stops early drops the stream
	resp, err := b.e.send(ctx, http.MethodGet, "/v1/blobs", &request{query: query("after", afterText, "limit", strconv.Itoa(max(limit, 0)))}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorOf(resp)
	}
	dec := json.NewDecoder(resp.Body)
	bad := func(err error) error { return fmt.Errorf("blob list: %w: %w", errMalformed, err) }
	if err := expect(dec, json.Delim('{')); err != nil {
		return bad(err)
	}
	var tail wire.Error
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		switch tok {
		case "blobs":
			if err := expect(dec, json.Delim('[')); err != nil {
				return bad(err)
			}
			for dec.More() {
				var info wire.BlobInfo
				if err := dec.Decode(&info); err != nil {
					return bad(err)
				}
				key, err := blob.ParseKey(info.Key)
				if err != nil {
					return bad(err)
				}
				if !yield(blob.Info{Key: key, Size: info.Size}) {
					return nil
				}
			}
			if err := expect(dec, json.Delim(']')); err != nil {
				return bad(err)
			}
		case "error":
			if err := dec.Decode(&tail.Error); err != nil {
				return bad(err)
			}
		case "code":
			if err := dec.Decode(&tail.Code); err != nil {
				return bad(err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return bad(err)
			}
		}
	}
	if tail.Code != "" {
		return wire.Err(http.StatusInternalServerError, tail)
	}
	return expect(dec, json.Delim('}'))
}

func expect(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("got %v, want %v", tok, want)
	}
	return nil
}

func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) error {
	_, err := b.e.do(ctx, http.MethodDelete, "/v1/blobs/"+p.Key.String(), &request{query: query("now", timeText(p.Now))}, nil, nil)
	return err
}
