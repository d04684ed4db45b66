// The login page: the access key and secret key go to POST /api/login, which sets the
// session cookie; then the dashboard itself is loaded.
"use strict";

const form = document.getElementById("login");
const out = document.getElementById("login-error");

form.addEventListener("submit", async (e) => {
  e.preventDefault();
  out.replaceChildren();
  const body = {
    access_key: document.getElementById("login-access-key").value.trim(),
    secret_key: document.getElementById("login-secret-key").value,
  };
  let resp = null, data = null;
  try {
    resp = await fetch("/api/login", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    data = await resp.json();
  } catch (err) {
    data = {error: {type: "NetworkError", message: String(err)}};
  }
  if (resp && resp.ok) {
    // The view asked for before the login (its fragment survived the redirect here).
    location.replace("/" + location.hash);
    return;
  }
  const err = (data && data.error) || {};
  const box = document.createElement("div");
  box.className = "error";
  box.setAttribute("role", "alert");
  box.textContent = err.message || (resp ? resp.statusText : "no answer");
  out.replaceChildren(box);
});
// Until this script has run, a submit would be the browser's own (a reload that drops what
// was typed): the form says when it is handled here.
form.dataset.ready = "true";
