package gateway

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Client-supplied strings that end up in logs, metrics or error messages are
// bounded: a request may carry megabytes in any field.

// maxUserBytes bounds the OpenAI "user" field (an end-user id).
const maxUserBytes = 256

// maxLogString bounds a client-supplied string in a log line or message.
const maxLogString = 128

// checkUser refuses a user field longer than maxUserBytes.
func checkUser(u *string) *APIError {
	if u != nil && len(*u) > maxUserBytes {
		return errInvalid("user", "string_above_max_length",
			"Invalid 'user': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", maxUserBytes, len(*u))
	}
	return nil
}

// logString returns s, or its first maxLogString bytes (cut at a rune
// boundary) and its length when it is longer.
func logString(s string) string {
	if len(s) <= maxLogString {
		return s
	}
	cut := maxLogString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "?") + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// cacheSkipped reports a cache error that says the cache is skipped on
// purpose (a Redis circuit breaker is open: the error has a
// CacheUnavailable() bool method). The breaker logs that once; logging it
// for every request would only repeat it.
func cacheSkipped(err error) bool {
	var u interface{ CacheUnavailable() bool }
	return errors.As(err, &u) && u.CacheUnavailable()
}
