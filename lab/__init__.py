"""The lab: experiments, microbenchmarks and saved measurements; not part of the installed package."""
