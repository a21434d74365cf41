"""Prediction: what a fabric would give before it is measured. The alpha-beta model fitted
on an allreduce sweep (model), the step time of data-parallel training on a fabric (predict:
a workload, a fabric's alpha and beta, the nominal links each fabric plug-in declares), a
cluster's description and its collectives (cluster, collectives), the calibrated cluster
prediction (predict_cluster), the published studies it reproduces (study) and its figures
(predict_plot).

Reads results through launch.results and the host's GPU topology through launch.site.probe;
the report (launch.analysis) and `fabric-bench predict` (launch.cli.predict) show it."""
