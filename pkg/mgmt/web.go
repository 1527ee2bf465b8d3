package mgmt

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web dashboard (web/): static files that read the management API.
//
//go:embed web
var webFiles embed.FS

func dashboard() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fsrv := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:")
		fsrv.ServeHTTP(w, r)
	})
}
