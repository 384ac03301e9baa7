package server

// Page is the built-in page, for tests that serve it beside a fake API to
// drive what the real engine cannot produce on demand.
var Page = page
